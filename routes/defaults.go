package routes

import (
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Defaults of every optional field. docs/configuration.md lists them from
// this file.
const (
	DefaultKeyPrefix       = "/leasebridge/leases/"
	DefaultDialTimeout     = 5 * time.Second
	DefaultHTTPListen      = "127.0.0.1:9464"
	DefaultDataDir         = "/var/lib/leasebridge"
	DefaultClientID        = "leasebridge-{session}"
	DefaultStatusTopic     = "leasebridge/{session}/status"
	DefaultProtocolVersion = 4

	DefaultMQTTKeepAlive        = 30 * time.Second
	DefaultMQTTConnectTimeout   = 30 * time.Second
	DefaultMQTTReconcileTimeout = 30 * time.Second
	DefaultMQTTUnmatchedGrace   = 30 * time.Second
	DefaultMQTTCloseTimeout     = 1 * time.Second

	DefaultDeviceConnectTimeout = 5 * time.Second
	DefaultDeviceRequestTimeout = 2 * time.Second
	DefaultDeviceCloseTimeout   = 1 * time.Second
	DefaultUnitID               = 1
	DefaultByteOrder            = "ABCD"
	DefaultPollInterval         = 1 * time.Second
	DefaultPublish              = "on_change"
	DefaultTopic                = "leasebridge/{session}/{device}/{tag}"
	DefaultS7Port               = "102"
	DefaultModbusPort           = "502"
	DefaultBaudRate             = 19200
	DefaultDataBits             = 8
	DefaultParity               = "E"
	DefaultStopBits             = 1
)

func setDur(d *Duration, def time.Duration) {
	if *d == 0 {
		*d = Duration(def)
	}
}

func setStr(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func setInt(i *int, def int) {
	if *i == 0 {
		*i = def
	}
}

// applyDefaults fills every optional field left empty.
func (c *Config) applyDefaults() {
	setStr(&c.HTTPListen, DefaultHTTPListen)
	setStr(&c.DataDir, DefaultDataDir)
	setStr(&c.LeaseStore.KeyPrefix, DefaultKeyPrefix)
	setDur(&c.LeaseStore.DialTimeout, DefaultDialTimeout)
	for _, b := range c.Brokers {
		if b == nil {
			continue
		}
		setStr(&b.ClientID, DefaultClientID)
		setStr(&b.StatusTopic, DefaultStatusTopic)
		setInt(&b.ProtocolVersion, DefaultProtocolVersion)
		setDur(&b.KeepAlive, DefaultMQTTKeepAlive)
		setDur(&b.ConnectTimeout, DefaultMQTTConnectTimeout)
		setDur(&b.ReconcileTimeout, DefaultMQTTReconcileTimeout)
		setDur(&b.UnmatchedGrace, DefaultMQTTUnmatchedGrace)
		setDur(&b.CloseTimeout, DefaultMQTTCloseTimeout)
	}
	for _, d := range c.Devices {
		if d == nil {
			continue
		}
		setDur(&d.ConnectTimeout, DefaultDeviceConnectTimeout)
		setDur(&d.RequestTimeout, DefaultDeviceRequestTimeout)
		setDur(&d.CloseTimeout, DefaultDeviceCloseTimeout)
		switch d.Kind {
		case KindModbusTCP, KindModbusRTU:
			if d.UnitID == nil {
				u := DefaultUnitID
				d.UnitID = &u
			}
			setStr(&d.ByteOrder, DefaultByteOrder)
			if d.MergeRequests == nil {
				t := true
				d.MergeRequests = &t
			}
		}
		if d.Kind == KindModbusRTU {
			setInt(&d.Serial.BaudRate, DefaultBaudRate)
			setInt(&d.Serial.DataBits, DefaultDataBits)
			setStr(&d.Serial.Parity, DefaultParity)
			setInt(&d.Serial.StopBits, DefaultStopBits)
		}
		if d.Kind == KindOPCUA {
			setStr(&d.SecurityPolicy, "None")
			setStr(&d.SecurityMode, "None")
		}
		for _, g := range d.Groups {
			if g == nil {
				continue
			}
			setDur(&g.Interval, DefaultPollInterval)
			setStr(&g.Mode, "poll")
		}
	}
	for _, r := range c.Routes {
		if r == nil {
			continue
		}
		switch r.Kind {
		case RoutePoll:
			setStr(&r.Publish, DefaultPublish)
			setStr(&r.Topic, DefaultTopic)
		case RouteBridge:
			for _, m := range r.Topics {
				if m != nil {
					setStr(&m.Direction, "in")
				}
			}
		}
	}
}

// ActivationBound is the broker transport's aggregate activation bound,
// 3*connect_timeout + 3*reconcile_timeout + 2*unmatched_grace. Validation
// has refused a configuration where it overflows, so the error is moot
// after Load.
func (b *Broker) ActivationBound() time.Duration {
	d, _ := admission.MQTTActivationBound(b.ConnectTimeout.D(), b.ReconcileTimeout.D(), b.UnmatchedGrace.D())
	return d
}

// CloseBound is the longest the broker transport's disconnect may take.
func (b *Broker) CloseBound() time.Duration { return b.CloseTimeout.D() }

// ActivationBound is the device transport's activation bound: one connect
// and the first successful read.
func (d *Device) ActivationBound() time.Duration {
	return d.ConnectTimeout.D() + d.RequestTimeout.D()
}

// CloseBound is the longest the device transport's close may take.
func (d *Device) CloseBound() time.Duration { return d.CloseTimeout.D() }
