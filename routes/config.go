// Package routes holds leasebridge's configuration model: the YAML file,
// decoded strictly with positions, its defaults, and its reduction to one
// canonical set of manager inputs per session for admission.
package routes

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Config is a whole leasebridge configuration file.
type Config struct {
	// File is the path the configuration was read from.
	File string `yaml:"-"`
	// DeploymentMode picks the lease profile: standalone or clustered.
	DeploymentMode admission.Mode `yaml:"deployment_mode"`
	// Node names this bridge; the owner identity is Node plus a suffix new
	// at every process start. Defaults to the host name at run time.
	Node string `yaml:"node"`
	// DataDir holds the embedded lease store of a standalone node (in
	// data_dir/etcd, locked by data_dir/etcd.lock; docs/operations.md gives
	// the disk it needs) and the persistent OPC UA client certificate.
	DataDir string `yaml:"data_dir"`
	// HTTPListen is the address of /metrics, /healthz, /readyz, /sessions,
	// /fleet and the fleet page at /.
	HTTPListen string `yaml:"http_listen"`
	// Spread, when true, makes this node ask for its fair share of the
	// sessions (ceil(sessions / live nodes)) through planned handovers,
	// one at a time; rendezvous hashing picks which
	// (docs/lease-protocol.md, spread). Every node of a fleet should agree.
	// A standby that is not a dead owner's row's taker then defers its
	// takeover, so admission adds takeover_deferral = 2*pb + 3*C to every
	// owner-death budget (docs/failover-budget.md).
	Spread bool `yaml:"spread"`
	// LeaseStore is where the lease rows live.
	LeaseStore LeaseStore `yaml:"lease_store"`
	// Manager holds the defaults of every manager input; a route's own
	// manager block overrides them field by field.
	Manager Manager `yaml:"manager"`
	// Brokers are the MQTT brokers routes publish to and bridge between,
	// by name.
	Brokers map[string]*Broker `yaml:"brokers"`
	// Devices are the exclusive device connections, by name.
	Devices map[string]*Device `yaml:"devices"`
	// Routes are the data flows; each runs under the lease of its session.
	Routes []*Route `yaml:"routes"`

	// positions maps key paths to where they were written.
	positions map[string]pos
}

// LeaseStore is the etcd cluster holding one lease row per session.
type LeaseStore struct {
	// Endpoints of the etcd cluster; empty on a standalone node means the
	// embedded single-member store in data_dir.
	Endpoints []string `yaml:"endpoints"`
	// KeyPrefix is prepended to each session id to form its lease key.
	// It names a fleet: the nodes sharing it compete for the same rows,
	// and two fleets must never name one device (docs/lease-protocol.md,
	// endpoint claims).
	KeyPrefix string `yaml:"key_prefix"`
	// DialTimeout bounds connecting to the cluster at start-up.
	DialTimeout Duration `yaml:"dial_timeout"`
	// TLS is the client TLS setup for https endpoints.
	TLS         *TLS `yaml:"tls"`
	Credentials `yaml:",inline"`
	// Members, when set, make the fleet its own lease store: each entry is
	// one etcd member run by `leasebridge store` on the node of that name,
	// and every bridge of the fleet uses their client URLs as endpoints. A
	// node outside the list runs bridges only (`store` refuses it); a file
	// with members and no routes is a witness's, whose node must be listed
	// (docs/fleet-store.md).
	Members []StoreMember `yaml:"members"`
	// HeartbeatInterval is the members' raft heartbeat (etcd's
	// --heartbeat-interval).
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// ElectionTimeout is the members' raft election timeout (etcd's
	// --election-timeout); admission charges the store's recovery from it.
	ElectionTimeout Duration `yaml:"election_timeout"`
	// Plaintext, when true, runs the members and their clients without
	// TLS; only ever on a trusted, isolated network.
	Plaintext bool `yaml:"plaintext"`
	// MemberTLS is the certificate of the member this node runs: ca_file
	// is the fleet CA every peer and client certificate must come from,
	// cert_file and key_file serve both server and client auth (peer
	// traffic goes both ways). Required on a member's node unless
	// plaintext.
	MemberTLS *TLS `yaml:"member_tls"`
	// Kubernetes, when set, keeps the lease rows as coordination.k8s.io
	// Lease objects through the Kubernetes API server instead of in etcd
	// (docs/lease-protocol.md, the Kubernetes lease store): no etcd to
	// run, only a Role on leases (examples/kubernetes/lease-rbac.yaml).
	Kubernetes *KubernetesStore `yaml:"kubernetes"`
}

// KubernetesStore locates the API server and namespace of a Kubernetes
// lease store.
type KubernetesStore struct {
	// Namespace holds the Lease objects; empty means the pod's own
	// namespace (its service account's), or the kubeconfig context's.
	Namespace string `yaml:"namespace"`
	// Kubeconfig is a kubeconfig file, for running outside the cluster;
	// empty means the pod's service account.
	Kubeconfig string `yaml:"kubeconfig"`
}

// StoreMember is one member of a fleet-run lease store.
type StoreMember struct {
	// Name is the node name of the gateway or pod that runs the member.
	Name string `yaml:"name"`
	// PeerURL is where the other members reach this one (raft traffic).
	PeerURL string `yaml:"peer_url"`
	// ClientURL is where bridges and tools reach this member.
	ClientURL string `yaml:"client_url"`
}

// Credentials are a user name and a password read from a file or an
// environment variable, never written into the configuration itself.
type Credentials struct {
	// Username to authenticate as.
	Username string `yaml:"username"`
	// PasswordFile is a file holding the password (trailing newline ignored).
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `yaml:"password_env"`
}

// TLS is a client TLS setup from PEM files.
type TLS struct {
	// CAFile holds the PEM certificates the server is verified against;
	// empty means the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile is the client certificate, for mutual TLS (with key_file).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the client certificate's private key.
	KeyFile string `yaml:"key_file"`
	// ServerName overrides the name the server certificate must carry.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify disables server verification; for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Manager is the set of manager inputs; a key left out is not pinned.
type Manager struct {
	// LeaseTTL is how long a standby must see the same row revision before
	// it takes the row over.
	LeaseTTL *Duration `yaml:"lease_ttl"`
	// RenewInterval is the owner's renew cadence.
	RenewInterval *Duration `yaml:"renew_interval"`
	// LeaseRenewJitter spreads renewals uniformly over renew_interval +-
	// lease_renew_jitter/2.
	LeaseRenewJitter *Duration `yaml:"lease_renew_jitter"`
	// RenewCallTimeout bounds every lease-store call (one Acquire shares one).
	RenewCallTimeout *Duration `yaml:"renew_call_timeout"`
	// AcquirePollInterval is a standby's poll period, jittered by +-1/4.
	AcquirePollInterval *Duration `yaml:"acquire_poll_interval"`
	// MaxRenewFails is the failed-renew streak after which every round also
	// runs an authoritative ownership read.
	MaxRenewFails *int `yaml:"max_renew_fails"`
	// StepDownGrace is the settlement grace of a broker-path step-down.
	StepDownGrace *Duration `yaml:"step_down_grace"`
	// BrokerHealthStepDown is off, or how long the broker path may stay not
	// converged before the owner steps down; required with failover_slo.
	BrokerHealthStepDown *BrokerHealth `yaml:"broker_health_step_down"`
	// DevicePathStepDown is off (the default), or how long a session's
	// device may stay unreachable, while the lease store is fine, before
	// the owner releases that one session so a node that may reach the
	// device takes it (docs/failover-budget.md).
	DevicePathStepDown *BrokerHealth `yaml:"device_path_step_down"`
	// DevicePathCooldown is how long a node that released a session for
	// its device path does not compete for it. Default: the larger of
	// device_path_step_down and a standby's pickup (2 poll boundaries + 2
	// renew_call_timeout).
	DevicePathCooldown *Duration `yaml:"device_path_cooldown"`
	// StartupAllowance is added to every budget (process start, restarts).
	StartupAllowance *Duration `yaml:"startup_allowance"`
	// FailoverSLO is the declared objective every budget must fit.
	FailoverSLO *Duration `yaml:"failover_slo"`
}

// Broker is an MQTT broker reached through the paho transport.
type Broker struct {
	// URL is tcp://, ssl://, mqtt://, mqtts://, ws:// or wss:// host:port.
	URL string `yaml:"url"`
	// ClientID is fixed per session so a broker never sees the bridge twice;
	// "{session}" and "{node}" are replaced. Default: leasebridge-{session}.
	ClientID string `yaml:"client_id"`
	// ProtocolVersion is 3 (MQTT 3.1) or 4 (MQTT 3.1.1), what paho supports.
	ProtocolVersion int `yaml:"protocol_version"`
	// TLS is the client TLS setup for ssl://, tls://, mqtts:// and wss://.
	TLS         *TLS `yaml:"tls"`
	Credentials `yaml:",inline"`
	// KeepAlive is the MQTT keepalive, in whole seconds; a cut path is
	// detected within about 1.5 times it.
	KeepAlive Duration `yaml:"keepalive"`
	// ConnectTimeout bounds one connect attempt.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// ReconcileTimeout bounds subscribing every topic after a connect.
	ReconcileTimeout Duration `yaml:"reconcile_timeout"`
	// UnmatchedGrace is how long an unconverged connection is given before
	// it is recycled.
	UnmatchedGrace Duration `yaml:"unmatched_grace"`
	// CloseTimeout bounds the disconnect.
	CloseTimeout Duration `yaml:"close_timeout"`
	// StatusTopic carries the session's owner, epoch and state, retained;
	// "{session}" is replaced. Default: leasebridge/{session}/status.
	StatusTopic string `yaml:"status_topic"`
	// Line is where the broker is defined.
	Line int `yaml:"-"`
}

// Device is one exclusive device connection and its tags.
type Device struct {
	// Kind is modbus_tcp, modbus_rtu, s7 or opcua: a kind registered by
	// its transport package, which also owns the keys of that kind.
	Kind string `yaml:"kind"`
	// Address is host:port (modbus_tcp, s7; a bare host means port 502
	// or 102, an IPv6 address is written [addr]:port), a serial device
	// path (modbus_rtu) or an opc.tcp:// endpoint (opcua). Two device
	// entries never share an endpoint (docs/devices.md).
	Address string `yaml:"address"`
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// RequestTimeout bounds one request and the first read of activation.
	RequestTimeout Duration `yaml:"request_timeout"`
	// CloseTimeout bounds closing the connection.
	CloseTimeout Duration `yaml:"close_timeout"`

	// Groups are the device's poll groups.
	Groups []*PollGroup `yaml:"groups"`
	// Pin limits the nodes the sessions using the device may run on.
	Pin `yaml:",inline"`
	// Settings is the kind's own configuration, decoded from the keys
	// its DeviceKind declares (a *s7.Config for s7, a *opcua.Config for
	// opcua, a *modbus.Config for modbus_tcp, a *modbus.RTUConfig for
	// modbus_rtu); nil for a kind without settings or a Device built in
	// code.
	Settings any `yaml:"-"`
	// Line is where the device is defined.
	Line int `yaml:"-"`
}

// Timeouts are connect_timeout, request_timeout and close_timeout, each
// its default when unset: a Device built in code rather than by Parse has
// no defaults applied.
func (d *Device) Timeouts() (connect, request, closing time.Duration) {
	or := func(v Duration, def time.Duration) time.Duration {
		if v > 0 {
			return v.D()
		}
		return def
	}
	return or(d.ConnectTimeout, DefaultDeviceConnectTimeout), or(d.RequestTimeout, DefaultDeviceRequestTimeout),
		or(d.CloseTimeout, DefaultDeviceCloseTimeout)
}

// PollGroup is a set of tags read together at one interval.
type PollGroup struct {
	// Name identifies the group in routes and topics.
	Name string `yaml:"name"`
	// Interval is the poll period. For a subscription it is also the
	// sampling interval; a pushed value is published as it arrives.
	Interval Duration `yaml:"interval"`
	// Mode is poll (default) or, for OPC UA, subscribe.
	Mode string `yaml:"mode"`
	// PublishingInterval and Deadband apply to OPC UA subscriptions.
	PublishingInterval Duration `yaml:"publishing_interval"`
	// Tags are the values read together.
	Tags []*Tag `yaml:"tags"`
	// Settings is the kind's own group configuration, decoded from the
	// keys of its DeviceKind.GroupSettings (a *modbus.GroupConfig for the
	// Modbus kinds); nil for a kind without group keys or a PollGroup
	// built in code.
	Settings any `yaml:"-"`
	// Line is where the group is defined.
	Line int `yaml:"-"`
}

// Tag is one named value on a device.
type Tag struct {
	// Name identifies the tag in topics and write requests; unique per device.
	Name string `yaml:"name"`
	// Address is a register number (Modbus), a TIA address such as
	// DB1.DBW10 (S7), or a node id such as ns=2;s=Temp (OPC UA).
	Address string `yaml:"address"`
	// Type is bool, int8, uint8, int16, uint16, int32, uint32, int64,
	// uint64, float32, float64 or string.
	Type string `yaml:"type"`
	// Length of a string: registers (Modbus) or bytes (S7).
	Length int `yaml:"length"`
	// Scale multiplies the raw value (value = raw*scale + offset).
	Scale *float64 `yaml:"scale"`
	// Offset is added after scale.
	Offset float64 `yaml:"offset"`
	// Deadband is the change a value must exceed to be published (on_change).
	Deadband float64 `yaml:"deadband"`
	// Writable allows write requests to the tag.
	Writable bool `yaml:"writable"`
	// Settings is the kind's own tag configuration, decoded from the
	// keys of its DeviceKind.TagSettings (a *modbus.TagConfig for the
	// Modbus kinds); nil for a kind without tag keys or a Tag built in
	// code.
	Settings any `yaml:"-"`
	// Line is where the tag is defined.
	Line int `yaml:"-"`
}

// Route kinds.
const (
	RoutePoll   = "poll"   // device tags -> MQTT topics
	RouteWrite  = "write"  // MQTT request -> device write -> MQTT reply
	RouteBridge = "bridge" // remote MQTT <-> local MQTT
)

// Route is one data flow of a session.
type Route struct {
	// Name identifies the route; unique, required.
	Name string `yaml:"name"`
	// Session names the lease the route runs under; several routes may
	// share one and must then agree on every manager input.
	Session string `yaml:"session"`
	// Kind is poll, write or bridge.
	Kind string `yaml:"kind"`
	// Device is the device of a poll or write route.
	Device string `yaml:"device"`
	// Broker is the (local) broker the route publishes to and reads from.
	Broker string `yaml:"broker"`
	// Groups are the device's poll groups a poll route publishes; all when
	// empty.
	Groups []string `yaml:"groups"`
	// Topic is the publish topic template of a poll route; "{session}",
	// "{device}", "{group}" and "{tag}" are replaced.
	Topic string `yaml:"topic"`
	// Publish is on_change (default) or every_poll.
	Publish string `yaml:"publish"`
	// QoS of the route's publications and subscriptions: 0, 1 or 2 (a
	// write route defaults to 1, so requests wait for the next owner).
	QoS int `yaml:"qos"`
	// Retain publishes each topic's last value as retained.
	Retain bool `yaml:"retain"`
	// RequestTopic is where a write route receives write requests.
	RequestTopic string `yaml:"request_topic"`
	// ReplyTopic is where a write route answers them.
	ReplyTopic string `yaml:"reply_topic"`
	// MaxAge is the oldest write request a write route executes, counted
	// from the request's issued_at to the instant before the device write;
	// an older one is refused as stale (docs/writes.md).
	MaxAge Duration `yaml:"max_age"`
	// ClockSkew is how far a write request's issued_at may lie in the
	// future of this bridge's clock before it is refused (clock_skew).
	ClockSkew Duration `yaml:"clock_skew"`
	// Remote is the remote broker of a bridge route.
	Remote string `yaml:"remote"`
	// Topics are a bridge route's topic mappings.
	Topics []*TopicMap `yaml:"topics"`
	// Manager overrides the file's manager inputs for this route's session.
	Manager Manager `yaml:"manager"`
	// Pin limits the nodes the route's session may run on.
	Pin `yaml:",inline"`
	// Line is where the route is defined.
	Line int `yaml:"-"`
}

// TopicMap maps topics across a bridge route.
type TopicMap struct {
	// From is a topic filter on the source broker.
	From string `yaml:"from"`
	// To replaces the part of the topic before the first wildcard of from
	// (site/# with to v/ maps site/a/b to v/a/b); for a from without
	// wildcards it is the target topic; empty keeps the topic.
	To string `yaml:"to"`
	// Direction is in (remote to local) or out (local to remote).
	Direction string `yaml:"direction"`
	// QoS of the mapping's subscription and publications.
	QoS int `yaml:"qos"`
	// Line is where the mapping is defined.
	Line int `yaml:"-"`
}

// Duration is a time.Duration written as a Go duration string ("45s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// BrokerHealth is an off-or-duration value as written:
// broker_health_step_down and device_path_step_down.
type BrokerHealth admission.BrokerHealth

// ErrPasswordEnvUnset reports a password_env naming a variable that is not
// set. Like a password_file that is missing, it is the deployment's to
// provide: admit, a dry run away from it, accepts both; run refuses them.
var ErrPasswordEnvUnset = errors.New("routes: password_env names a variable that is not set")

// credentials returns c; a kind's settings that embed Credentials
// disclose them through it (Device.Credentials).
func (c Credentials) credentials() Credentials { return c }

// Credentials are the user and password source of the device's kind
// settings, when they embed Credentials (opcua does), so that admit can
// tell a password the deployment has not provided.
func (d *Device) Credentials() (Credentials, bool) {
	s, ok := d.Settings.(interface{ credentials() Credentials })
	if !ok {
		return Credentials{}, false
	}
	return s.credentials(), true
}

// DeploymentInput reports whether err comes from an input the deployment
// provides and a dry run away from it may lack: a file that cannot be
// read (a CA, certificate, key or password file) or an unset password_env.
func DeploymentInput(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) || errors.Is(err, ErrPasswordEnvUnset)
}

// Password reads the password from password_file (trailing newline
// dropped) or password_env; empty when neither is set. It is read when a
// connection is made, never at admission.
func (c Credentials) Password() (string, error) {
	switch {
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("routes: password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("%w: %s", ErrPasswordEnvUnset, c.PasswordEnv)
		}
		return v, nil
	}
	return "", nil
}

// MissingPasswords lists the passwords (and the kubeconfig) the
// deployment provides that are missing here: a password_env variable that
// is not set, a password_file or kubeconfig that cannot be read, each at
// its key.
func (c *Config) MissingPasswords() Errors {
	var out Errors
	check := func(path string, cr Credentials) {
		if _, err := cr.Password(); err != nil {
			key, what := path+".password_file", "password_file "+cr.PasswordFile+" cannot be read"
			if cr.PasswordEnv != "" {
				key, what = path+".password_env", "password_env "+cr.PasswordEnv+" is not set"
			}
			out = append(out, c.ErrorAt(key, what))
		}
	}
	check("lease_store", c.LeaseStore.Credentials)
	if k := c.LeaseStore.Kubernetes; k != nil && k.Kubeconfig != "" {
		if _, err := os.Stat(k.Kubeconfig); err != nil {
			out = append(out, c.ErrorAt("lease_store.kubernetes.kubeconfig", "kubeconfig "+k.Kubeconfig+" cannot be read"))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Brokers)) {
		if b := c.Brokers[name]; b != nil {
			check("brokers."+name, b.Credentials)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Devices)) {
		if d := c.Devices[name]; d != nil {
			if dc, ok := d.Credentials(); ok {
				check("devices."+name, dc)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}
