package opcua

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gopcua/opcua/ua"

	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Kind is the device kind this package registers.
const Kind = "opcua"

// DefaultPort is the port of an opc.tcp:// endpoint that names none.
const DefaultPort = "4840"

// Config holds the keys an opcua device has beyond those of every device;
// routes decodes them strictly into the device's Settings.
type Config struct {
	// SecurityPolicy of an OPC UA session: None or Basic256Sha256.
	SecurityPolicy string `yaml:"security_policy"`
	// SecurityMode of an OPC UA session: None, Sign or SignAndEncrypt;
	// defaults to None with policy None and to SignAndEncrypt otherwise.
	SecurityMode string `yaml:"security_mode"`
	// CertFile is the OPC UA client certificate (PEM); created on first use
	// and kept. Default: <data_dir>/opcua/<device>-cert.pem.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the OPC UA client certificate's key. Default:
	// <data_dir>/opcua/<device>-key.pem.
	KeyFile string `yaml:"key_file"`
	// Credentials are the user; anonymous when username is empty.
	routes.Credentials `yaml:",inline"`
}

func init() {
	transports.RegisterDevice(routes.DeviceKind{
		Name:      Kind,
		Settings:  func() any { return &Config{} },
		Subscribe: true,
		Defaults:  defaults,
		Check:     checkDevice,
		CheckTag:  checkTag,
		Endpoint:  endpoint,
		Doc:       "An OPC UA server: `address` is an opc.tcp:// endpoint.",
	}, errs, New)
}

// settings is the device's Config; a Device built in code may carry none,
// which means security None and an anonymous user.
func settings(dev *routes.Device) (*Config, error) { return routes.SettingsOf[Config](dev.Settings) }

// defaults fills security None/None, or SignAndEncrypt with a policy, and
// the client certificate's files under data_dir, named after the device;
// routes has given it its Config.
func defaults(c *routes.Config, name string, d *routes.Device) {
	s, err := settings(d)
	if err != nil {
		return // Check reports it
	}
	s.SecurityPolicy, s.SecurityMode = s.securityNames()
	if s.CertFile == "" {
		s.CertFile = filepath.Join(c.DataDir, "opcua", name+"-cert.pem")
	}
	if s.KeyFile == "" {
		s.KeyFile = filepath.Join(c.DataDir, "opcua", name+"-key.pem")
	}
}

// securityNames are the policy and mode as written, an empty one taking
// its default: None, and SignAndEncrypt with a policy.
func (s *Config) securityNames() (policy, mode string) {
	policy, mode = s.SecurityPolicy, s.SecurityMode
	if policy == "" {
		policy = PolicyNone
	}
	if mode == "" {
		mode = "SignAndEncrypt"
		if policy == PolicyNone {
			mode = "None"
		}
	}
	return policy, mode
}

// modes are the security modes by their name in the configuration.
var modes = map[string]ua.MessageSecurityMode{
	"None": ua.MessageSecurityModeNone, "Sign": ua.MessageSecurityModeSign, "SignAndEncrypt": ua.MessageSecurityModeSignAndEncrypt,
}

// problem is a broken rule, the key it is reported at and its message.
type problem struct {
	key    string
	format string
	args   []any
}

// security is the policy and mode of s and the rules they break: the
// configuration reports each at its key, the transport refuses the first.
func (s *Config) security() (string, ua.MessageSecurityMode, []problem) {
	policy, name := s.securityNames()
	var out []problem
	if policy != PolicyNone && policy != PolicyBasic256Sha256 {
		out = append(out, problem{"security_policy", "security_policy %q: want None or Basic256Sha256", []any{policy}})
	}
	mode, ok := modes[name]
	if !ok {
		out = append(out, problem{"security_mode", "security_mode %q: want None, Sign or SignAndEncrypt", []any{name}})
	}
	if (policy == PolicyNone) != (name == "None") {
		out = append(out, problem{"security_mode", "security_policy %s with security_mode %s: None goes with None", []any{policy, name}})
	}
	return policy, mode, out
}

// scheme starts every device address; addressRule is the message of one
// that lacks it, the password of the address redacted.
const (
	scheme      = "opc.tcp://"
	addressRule = "address %q: want an endpoint such as opc.tcp://host:4840"
)

// checkDevice reports the address, security and credential rules of a
// decoded device, at the key that breaks them.
func checkDevice(c *routes.Config, path string, d *routes.Device) routes.Errors {
	var errs routes.Errors
	add := func(key, format string, args ...any) { errs = append(errs, c.ErrorAtf(path+key, format, args...)) }
	if d.Address != "" && !strings.HasPrefix(d.Address, scheme) {
		add(".address", addressRule, redact.URL(d.Address))
	}
	s, err := settings(d)
	if err != nil {
		add("", "%s", err)
		return errs
	}
	_, _, problems := s.security()
	for _, p := range problems {
		add("."+p.key, p.format, p.args...)
	}
	return append(errs, c.CheckCredentials(path, s.Credentials, nil)...)
}

// checkTag refuses a tag address the transport cannot read as a node id.
func checkTag(c *routes.Config, path string, _ *routes.Device, t *routes.Tag) routes.Errors {
	if t.Address == "" {
		return nil // the common rules report it
	}
	if _, err := parseNodeID(t.Address); err != nil {
		return routes.Errors{c.ErrorAtf(path+".address", "address %q: %s", t.Address, err)}
	}
	return nil
}

// nodeIDForm is the explicit node id syntax. The library would also take
// a bare name as a string id in namespace 0, which hides typos such as a
// Modbus or S7 address pasted into an OPC UA tag.
var nodeIDForm = regexp.MustCompile(`^(ns=[0-9]+;)?[isgb]=.+$`)

// errNodeID is the rule a tag address breaks when it is not a node id.
var errNodeID = errors.New("want a node id such as ns=2;s=Temperature or i=2258")

// parseNodeID reads a tag address as a node id in its explicit form, for
// the configuration and the transport alike.
func parseNodeID(addr string) (*ua.NodeID, error) {
	n, err := ua.ParseNodeID(addr)
	if err != nil || !nodeIDForm.MatchString(addr) {
		return nil, errNodeID
	}
	return n, nil
}

// endpoint is the endpoint URL without user information, query or
// fragment: scheme, host, port (4840 when omitted) and path.
func endpoint(d *routes.Device) (routes.Endpoint, error) {
	u, err := url.Parse(d.Address)
	if err != nil || u.Host == "" {
		// url.Parse quotes its input; an address may hold a password.
		return routes.Endpoint{}, fmt.Errorf("%w: address: want an endpoint such as opc.tcp://host:4840", ErrConfig)
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), DefaultPort)
	}
	host, port, local, err := routes.HostPort(hp, DefaultPort)
	if err != nil {
		return routes.Endpoint{}, err
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return routes.Endpoint{ID: strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(host, port) + path, NodeLocal: local}, nil
}
