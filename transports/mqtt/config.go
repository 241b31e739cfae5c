package mqtt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/routes"
)

// Sentinel errors. Every error the package returns wraps one of them (or a
// context error) and names the broker URL and, where one is involved, the
// topic.
var (
	// ErrConfig reports a broker configuration the transport cannot use.
	ErrConfig = errors.New("mqtt: invalid configuration")
	// ErrMQTT5 reports protocol_version 5: paho.mqtt.golang speaks MQTT 3.1
	// and 3.1.1 only, so the epoch travels in the JSON payload instead of an
	// MQTT 5 user property.
	ErrMQTT5 = errors.New("mqtt: MQTT 5 (protocol_version 5) is not supported by the paho.mqtt.golang client; use 4 (MQTT 3.1.1) or 3 (MQTT 3.1)")
	// ErrRefused reports a CONNACK refusal that retrying cannot fix: bad
	// user name or password, not authorized, rejected client id or
	// protocol version. Activation stops at once on it.
	ErrRefused = errors.New("mqtt: broker refused the connection")
	// ErrTLS reports a certificate the TLS handshake rejected, on either
	// side: an unknown CA, a wrong host name, an expired or missing client
	// certificate. Activation stops at once on it.
	ErrTLS = errors.New("mqtt: TLS certificate rejected")
	// ErrNotConverged reports an activation that used all of its attempts
	// without being connected with every subscription acknowledged.
	ErrNotConverged = errors.New("mqtt: not converged")
	// ErrSubscriptionRejected reports a SUBACK failure code for a topic.
	ErrSubscriptionRejected = errors.New("mqtt: subscription rejected by broker")
	// ErrNotConnected reports a publish while the transport has no
	// connection.
	ErrNotConnected = errors.New("mqtt: not connected")
	// ErrClosed reports use of a closed transport.
	ErrClosed = errors.New("mqtt: transport closed")
	// ErrOpen reports Open on a transport that is already open.
	ErrOpen = errors.New("mqtt: transport already open")
)

// Config is what a Client is built from: the broker as configured (after
// routes applied its defaults) and the session it serves.
type Config struct {
	// Broker is the broker configuration; zero durations take the
	// routes.DefaultMQTT* values so a hand-built Config behaves like a
	// loaded one.
	Broker routes.Broker
	// Session names the session; it fills "{session}" in the client id and
	// the status topic.
	Session string
	// Node fills "{node}" in the client id.
	Node string
	// CleanSession asks the broker to drop the session's subscriptions and
	// queued messages at every connect. The default (false) keeps them, so
	// QoS 1/2 messages that arrived while no owner was connected are
	// delivered to the next owner, which uses the same fixed client id.
	// Routes that must not act on stale requests (device writes) set it.
	CleanSession bool
	// AllowMissingInputs builds the client although a TLS or password file
	// it names cannot be read or its password_env is not set (inputs the
	// deployment provides; see routes.DeploymentInput): admission away from
	// the deployment still learns its bounds. Open then fails with the
	// missing input.
	AllowMissingInputs bool
}

// brokerURL is the broker's URL. It prints redacted (a password in its
// userinfo becomes xxxxx) because errors and logs print it with %s; paho
// gets the full URL, whose userinfo it uses as the credentials.
type brokerURL struct{ *url.URL }

// String returns the URL with its password redacted.
func (u brokerURL) String() string { return redact.URL(u.URL.String()) }

// settings is a Config resolved once: defaults applied and checked.
type settings struct {
	url         brokerURL
	clientID    string
	statusTopic string
	protocol    uint
	keepAlive   time.Duration
	connect     time.Duration
	reconcile   time.Duration
	grace       time.Duration
	close       time.Duration
	bound       time.Duration
	tls         *tls.Config
	creds       routes.Credentials
	clean       bool
	// missing is the deployment input the client was built without
	// (Config.AllowMissingInputs); Open refuses while it is set.
	missing error
}

func resolve(cfg Config) (*settings, error) {
	b := cfg.Broker
	s := &settings{
		clientID:    orDefault(b.ClientID, routes.DefaultClientID),
		statusTopic: orDefault(b.StatusTopic, routes.DefaultStatusTopic),
		keepAlive:   durDefault(b.KeepAlive.D(), routes.DefaultMQTTKeepAlive),
		connect:     durDefault(b.ConnectTimeout.D(), routes.DefaultMQTTConnectTimeout),
		reconcile:   durDefault(b.ReconcileTimeout.D(), routes.DefaultMQTTReconcileTimeout),
		grace:       durDefault(b.UnmatchedGrace.D(), routes.DefaultMQTTUnmatchedGrace),
		close:       durDefault(b.CloseTimeout.D(), routes.DefaultMQTTCloseTimeout),
		creds:       b.Credentials,
		clean:       cfg.CleanSession,
	}
	s.clientID = routes.ClientID(s.clientID, cfg.Session, cfg.Node)
	s.statusTopic = strings.ReplaceAll(s.statusTopic, "{session}", cfg.Session)

	shown := redact.URL(b.URL)
	u, err := url.Parse(b.URL)
	if err != nil || u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("%w: broker url %q: want scheme://host:port", ErrConfig, shown)
	}
	s.url = brokerURL{u}
	secure := false
	switch u.Scheme {
	case "tcp", "mqtt", "ws":
	case "ssl", "tls", "mqtts", "wss":
		secure = true
	default:
		return nil, fmt.Errorf("%w: broker url %q: scheme %q unsupported (tcp, mqtt, ssl, tls, mqtts, ws, wss)", ErrConfig, shown, u.Scheme)
	}
	switch b.ProtocolVersion {
	case 0, 4:
		s.protocol = 4
	case 3:
		s.protocol = 3
	case 5:
		return nil, fmt.Errorf("broker %s: %w", shown, ErrMQTT5)
	default:
		return nil, fmt.Errorf("%w: broker %s: protocol_version %d: want 3 (MQTT 3.1) or 4 (MQTT 3.1.1)", ErrConfig, shown, b.ProtocolVersion)
	}
	// paho counts the keepalive in whole seconds; a fraction would be
	// silently truncated and the detection bound would lie.
	if s.keepAlive < time.Second || s.keepAlive%time.Second != 0 {
		return nil, fmt.Errorf("%w: broker %s: keepalive %v: want a whole number of seconds, at least 1s", ErrConfig, shown, s.keepAlive)
	}
	for name, d := range map[string]time.Duration{"connect_timeout": s.connect, "reconcile_timeout": s.reconcile, "unmatched_grace": s.grace, "close_timeout": s.close} {
		if d < 0 {
			return nil, fmt.Errorf("%w: broker %s: %s %v is negative", ErrConfig, shown, name, d)
		}
	}
	s.bound, err = admission.MQTTActivationBound(s.connect, s.reconcile, s.grace)
	if err != nil {
		return nil, fmt.Errorf("%w: broker %s: activation bound: %w", ErrConfig, shown, err)
	}
	if b.TLS != nil && !secure {
		return nil, fmt.Errorf("%w: broker %s: tls is configured but the url scheme %q is not a TLS scheme (ssl, tls, mqtts, wss)", ErrConfig, shown, u.Scheme)
	}
	if secure {
		if s.tls, err = tlsConfig(b.TLS); err != nil {
			err = fmt.Errorf("%w: broker %s: %w", ErrConfig, shown, err)
			if !s.tolerate(cfg, err) {
				return nil, err
			}
		}
	}
	if b.PasswordFile != "" && b.PasswordEnv != "" {
		return nil, fmt.Errorf("%w: broker %s: password_file and password_env are both set", ErrConfig, shown)
	}
	// Read once now so a missing file or variable fails at build time, not
	// first at activation; every connect reads it again (rotation).
	if _, err := s.password(); err != nil && !s.tolerate(cfg, err) {
		return nil, err
	}
	return s, nil
}

// tolerate records err as the missing input and reports true when it is
// one and cfg allows it.
func (s *settings) tolerate(cfg Config, err error) bool {
	if !cfg.AllowMissingInputs || !routes.DeploymentInput(err) {
		return false
	}
	if s.missing == nil {
		s.missing = err
	}
	return true
}

// password reads the password from its file or environment variable.
func (s *settings) password() (string, error) {
	p, err := s.creds.Password()
	if err != nil {
		return "", fmt.Errorf("%w: broker %s: %w", ErrConfig, s.url, err)
	}
	return p, nil
}

func tlsConfig(t *routes.TLS) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return c, nil // system roots
	}
	c.ServerName = t.ServerName
	c.InsecureSkipVerify = t.InsecureSkipVerify
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca_file %s: no PEM certificate found", t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("tls: cert_file and key_file go together (cert_file %q, key_file %q)", t.CertFile, t.KeyFile)
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls cert_file %s / key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func durDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// pingTimeout is how long paho waits for a PINGRESP before it declares the
// connection lost: half the keepalive, at least a second, so a cut is
// noticed well before the broker's own 1.5x keepalive timeout.
func pingTimeout(keepAlive time.Duration) time.Duration {
	return max(time.Second, keepAlive/2)
}

// pingCheckInterval is how often paho's keepalive loop looks at the
// connection (paho v1.5: 5s above a 10s keepalive, else keepalive/4).
func pingCheckInterval(keepAlive time.Duration) time.Duration {
	if keepAlive > 10*time.Second {
		return 5 * time.Second
	}
	return keepAlive / 4
}

// DetectionBound is the longest a silent cut (no FIN, no RST: a blackhole)
// can go unreported at this keepalive. paho checks the connection every
// pingCheckInterval (ci): it pings once nothing was received for a
// keepalive (first check after that: up to ci late), waits pingTimeout
// for the answer (checked the same way, and the ping time is taken just
// after a check: up to ci late again), then stops its workers before it
// reports the loss, for which one more ci is allowed:
// keepalive + pingTimeout + 3*ci (2.75s at a 1s keepalive, 60s at 30s).
// The step-down clock starts only after this detection.
func DetectionBound(keepAlive time.Duration) time.Duration {
	return keepAlive + pingTimeout(keepAlive) + 3*pingCheckInterval(keepAlive)
}
