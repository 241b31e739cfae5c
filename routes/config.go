// Package routes holds leasebridge's configuration model: the YAML file,
// decoded strictly with positions, its defaults, and its reduction to one
// canonical set of manager inputs per session for admission.
package routes

import (
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
	// DataDir holds the embedded lease store of a standalone node and the
	// persistent OPC UA client certificate.
	DataDir string `yaml:"data_dir"`
	// HTTPListen is the address of /metrics, /healthz and /readyz.
	HTTPListen string     `yaml:"http_listen"`
	LeaseStore LeaseStore `yaml:"lease_store"`
	// Manager holds the defaults of every manager input; a route's own
	// manager block overrides them field by field.
	Manager Manager            `yaml:"manager"`
	Brokers map[string]*Broker `yaml:"brokers"`
	Devices map[string]*Device `yaml:"devices"`
	Routes  []*Route           `yaml:"routes"`

	// positions maps key paths to where they were written.
	positions map[string]pos
}

// LeaseStore is the etcd cluster holding one lease row per session.
type LeaseStore struct {
	// Endpoints of the etcd cluster; empty on a standalone node means the
	// embedded single-member store in DataDir.
	Endpoints   []string `yaml:"endpoints"`
	KeyPrefix   string   `yaml:"key_prefix"`
	DialTimeout Duration `yaml:"dial_timeout"`
	TLS         *TLS     `yaml:"tls"`
	Credentials `yaml:",inline"`
}

// Credentials are a user name and a password read from a file or an
// environment variable, never written into the configuration itself.
type Credentials struct {
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
}

// TLS is a client TLS setup from PEM files.
type TLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Manager is the set of manager inputs; a nil field is not pinned.
type Manager struct {
	LeaseTTL             *Duration     `yaml:"lease_ttl"`
	RenewInterval        *Duration     `yaml:"renew_interval"`
	LeaseRenewJitter     *Duration     `yaml:"lease_renew_jitter"`
	RenewCallTimeout     *Duration     `yaml:"renew_call_timeout"`
	AcquirePollInterval  *Duration     `yaml:"acquire_poll_interval"`
	MaxRenewFails        *int          `yaml:"max_renew_fails"`
	StepDownGrace        *Duration     `yaml:"step_down_grace"`
	BrokerHealthStepDown *BrokerHealth `yaml:"broker_health_step_down"`
	StartupAllowance     *Duration     `yaml:"startup_allowance"`
	FailoverSLO          *Duration     `yaml:"failover_slo"`
}

// Broker is an MQTT broker reached through the paho transport.
type Broker struct {
	// URL is tcp://, ssl://, mqtt://, mqtts://, ws:// or wss:// host:port.
	URL string `yaml:"url"`
	// ClientID is fixed per session so a broker never sees the bridge twice;
	// "{session}" and "{node}" are replaced. Default: leasebridge-{session}.
	ClientID string `yaml:"client_id"`
	// ProtocolVersion is 3 (MQTT 3.1) or 4 (MQTT 3.1.1), what paho supports.
	ProtocolVersion int  `yaml:"protocol_version"`
	TLS             *TLS `yaml:"tls"`
	Credentials     `yaml:",inline"`
	KeepAlive       Duration `yaml:"keepalive"`
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
	Line        int    `yaml:"-"`
}

// Device kinds.
const (
	KindModbusTCP = "modbus_tcp"
	KindModbusRTU = "modbus_rtu"
	KindS7        = "s7"
	KindOPCUA     = "opcua"
)

// Device is one exclusive device connection and its tags.
type Device struct {
	// Kind is modbus_tcp, modbus_rtu, s7 or opcua.
	Kind string `yaml:"kind"`
	// Address is host:port (modbus_tcp, s7), a serial device path
	// (modbus_rtu) or an opc.tcp:// endpoint (opcua).
	Address        string   `yaml:"address"`
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// RequestTimeout bounds one request and the first read of activation.
	RequestTimeout Duration `yaml:"request_timeout"`
	CloseTimeout   Duration `yaml:"close_timeout"`

	// Modbus.
	UnitID *int `yaml:"unit_id"`
	// ByteOrder is the device default: ABCD, DCBA, BADC or CDAB.
	ByteOrder string `yaml:"byte_order"`
	// MergeRequests joins adjacent registers into one request.
	MergeRequests *bool  `yaml:"merge_requests"`
	Serial        Serial `yaml:"serial"`

	// S7.
	Rack int `yaml:"rack"`
	Slot int `yaml:"slot"`

	// OPC UA.
	SecurityPolicy string `yaml:"security_policy"`
	SecurityMode   string `yaml:"security_mode"`
	CertFile       string `yaml:"cert_file"`
	KeyFile        string `yaml:"key_file"`
	Credentials    `yaml:",inline"`

	Groups []*PollGroup `yaml:"groups"`
	Line   int          `yaml:"-"`
}

// Serial is the serial line of a Modbus RTU device.
type Serial struct {
	BaudRate int    `yaml:"baud_rate"`
	DataBits int    `yaml:"data_bits"`
	Parity   string `yaml:"parity"`
	StopBits int    `yaml:"stop_bits"`
}

// PollGroup is a set of tags read together at one interval.
type PollGroup struct {
	Name     string   `yaml:"name"`
	Interval Duration `yaml:"interval"`
	// Mode is poll (default) or, for OPC UA, subscribe.
	Mode string `yaml:"mode"`
	// PublishingInterval and Deadband apply to OPC UA subscriptions.
	PublishingInterval Duration `yaml:"publishing_interval"`
	Tags               []*Tag   `yaml:"tags"`
	Line               int      `yaml:"-"`
}

// Tag is one named value on a device.
type Tag struct {
	Name string `yaml:"name"`
	// Address is a register number (Modbus), a TIA address such as
	// DB1.DBW10 (S7), or a node id such as ns=2;s=Temp (OPC UA).
	Address string `yaml:"address"`
	// Register is holding, input, coil or discrete (Modbus only).
	Register string `yaml:"register"`
	// Type is bool, int16, uint16, int32, uint32, int64, uint64, float32,
	// float64 or string.
	Type      string   `yaml:"type"`
	ByteOrder string   `yaml:"byte_order"`
	Bit       *int     `yaml:"bit"`
	Length    int      `yaml:"length"`
	Scale     *float64 `yaml:"scale"`
	Offset    float64  `yaml:"offset"`
	Deadband  float64  `yaml:"deadband"`
	Writable  bool     `yaml:"writable"`
	Line      int      `yaml:"-"`
}

// Route kinds.
const (
	RoutePoll   = "poll"   // device tags -> MQTT topics
	RouteWrite  = "write"  // MQTT request -> device write -> MQTT reply
	RouteBridge = "bridge" // remote MQTT <-> local MQTT
)

// Route is one data flow of a session.
type Route struct {
	Name    string `yaml:"name"`
	Session string `yaml:"session"`
	Kind    string `yaml:"kind"`
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
	QoS     int    `yaml:"qos"`
	Retain  bool   `yaml:"retain"`
	// RequestTopic and ReplyTopic belong to a write route.
	RequestTopic string `yaml:"request_topic"`
	ReplyTopic   string `yaml:"reply_topic"`
	// Remote is the remote broker of a bridge route.
	Remote string      `yaml:"remote"`
	Topics []*TopicMap `yaml:"topics"`
	// Manager overrides the file's manager inputs for this route's session.
	Manager Manager `yaml:"manager"`
	Line    int     `yaml:"-"`
}

// TopicMap maps topics across a bridge route.
type TopicMap struct {
	// From is a filter on the source broker; To is the target prefix or
	// topic. Direction is in (remote -> local, default) or out.
	From      string `yaml:"from"`
	To        string `yaml:"to"`
	Direction string `yaml:"direction"`
	QoS       int    `yaml:"qos"`
	Line      int    `yaml:"-"`
}

// Duration is a time.Duration written as a Go duration string ("45s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// BrokerHealth is broker_health_step_down as written: off or a duration.
type BrokerHealth admission.BrokerHealth
