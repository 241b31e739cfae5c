package routes

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Defaults of every optional field. docs/configuration.md lists them from
// this file.
const (
	DefaultKeyPrefix   = "/leasebridge/leases/"
	DefaultDialTimeout = 5 * time.Second
	// DefaultStoreHeartbeat and DefaultStoreElection are etcd's own
	// defaults for a fleet-run store's members.
	DefaultStoreHeartbeat  = 100 * time.Millisecond
	DefaultStoreElection   = time.Second
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
	DefaultPollInterval         = 1 * time.Second
	DefaultPublish              = "on_change"
	DefaultTopic                = "leasebridge/{session}/{device}/{tag}"

	// DefaultWriteQoS is a write route's qos: at QoS 1 a request published
	// while no owner is connected waits in the session's persistent
	// broker session for the next owner.
	DefaultWriteQoS = 1
	// DefaultWriteMaxAge is a write route's max_age: a command older than
	// this is refused, never executed.
	DefaultWriteMaxAge = 10 * time.Second
	// DefaultWriteClockSkew is a write route's clock_skew: how far in the
	// future an issued_at may lie.
	DefaultWriteClockSkew = 1 * time.Second
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
	if c.DeploymentMode == "" {
		c.DeploymentMode = admission.Standalone
	}
	setStr(&c.HTTPListen, DefaultHTTPListen)
	setStr(&c.DataDir, DefaultDataDir)
	setStr(&c.LeaseStore.KeyPrefix, DefaultKeyPrefix)
	setDur(&c.LeaseStore.DialTimeout, DefaultDialTimeout)
	setDur(&c.LeaseStore.HeartbeatInterval, DefaultStoreHeartbeat)
	setDur(&c.LeaseStore.ElectionTimeout, DefaultStoreElection)
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
	for name, d := range c.Devices {
		if d == nil {
			continue
		}
		setDur(&d.ConnectTimeout, DefaultDeviceConnectTimeout)
		setDur(&d.RequestTimeout, DefaultDeviceRequestTimeout)
		setDur(&d.CloseTimeout, DefaultDeviceCloseTimeout)
		for _, g := range d.Groups {
			if g != nil {
				setDur(&g.Interval, DefaultPollInterval)
				setStr(&g.Mode, "poll")
			}
		}
		if k := LookupKind(d.Kind); k != nil {
			k.ensureSettings(d)
			if k.Defaults != nil {
				k.Defaults(c, name, d)
			}
		}
	}
	for i, r := range c.Routes {
		if r == nil {
			continue
		}
		switch r.Kind {
		case RoutePoll:
			setStr(&r.Publish, DefaultPublish)
			setStr(&r.Topic, DefaultTopic)
		case RouteWrite:
			// An explicit 0 is kept (positions says what was written).
			if !c.Written(fmt.Sprintf("routes[%d].qos", i)) {
				setInt(&r.QoS, DefaultWriteQoS)
			}
			if !c.Written(fmt.Sprintf("routes[%d].max_age", i)) {
				setDur(&r.MaxAge, DefaultWriteMaxAge)
			}
			if !c.Written(fmt.Sprintf("routes[%d].clock_skew", i)) {
				setDur(&r.ClockSkew, DefaultWriteClockSkew)
			}
		case RouteBridge:
			for _, m := range r.Topics {
				if m != nil {
					setStr(&m.Direction, "in")
				}
			}
		}
	}
}

// ensureSettings gives d, its groups and its tags the kind's settings
// structs they lack (a Device built in code, or a kind's defaults being
// documented), so the kind's Defaults has them to fill.
func (k *DeviceKind) ensureSettings(d *Device) {
	if d.Settings == nil {
		d.Settings = k.newSettings(deviceLevel)
	}
	for _, g := range d.Groups {
		if g == nil {
			continue
		}
		if g.Settings == nil {
			g.Settings = k.newSettings(groupLevel)
		}
		for _, t := range g.Tags {
			if t != nil && t.Settings == nil {
				t.Settings = k.newSettings(tagLevel)
			}
		}
	}
}

// Written reports whether the configuration file set the key at path
// (a key path such as "routes[0].manager.lease_ttl"): a key left to its
// default is not written.
func (c *Config) Written(path string) bool {
	_, ok := c.positions[path]
	return ok
}

// DefaultValues reports the default of every optional key, by key path with
// "*" for a name or an index ("brokers.*.connect_timeout"), as applied to an
// otherwise empty configuration. Device keys whose default depends on the
// kind list the kinds it applies to. docs/configuration.md is generated
// from it, so the page cannot drift from the code.
func DefaultValues() map[string]string {
	kinds := Kinds()
	c := &Config{Brokers: map[string]*Broker{"*": {}}, Devices: map[string]*Device{}}
	for _, k := range kinds {
		c.Devices[k] = &Device{Kind: k, Groups: []*PollGroup{{}}}
	}
	for _, k := range []string{RoutePoll, RouteWrite, RouteBridge} {
		c.Routes = append(c.Routes, &Route{Kind: k, Topics: []*TopicMap{{}}})
	}
	c.applyDefaults()
	raw := map[string]map[string]bool{} // path -> value -> seen
	perKind := map[string][]string{}    // device path -> kinds
	emit := func(path, value string) {
		if strings.HasSuffix(path, ".kind") {
			return // set above to reach each kind's defaults, not a default
		}
		if rest, ok := strings.CutPrefix(path, "devices."); ok {
			kind, field, _ := strings.Cut(rest, ".")
			path = "devices.*." + field
			perKind[path] = append(perKind[path], kind)
		}
		if rest, ok := strings.CutPrefix(path, "routes."); ok {
			_, field, _ := strings.Cut(rest, ".")
			path = "routes.*." + field
		}
		if raw[path] == nil {
			raw[path] = map[string]bool{}
		}
		raw[path][value] = true
	}
	collect(reflect.ValueOf(c).Elem(), "", emit)
	collectSettings(kinds, emit)
	out := map[string]string{
		// Only a write route has a qos default other than 0.
		"routes[*].qos": fmt.Sprintf("%d (write), 0 (poll, bridge)", DefaultWriteQoS),
	}
	for path, values := range raw {
		if _, set := out[path]; set {
			continue
		}
		vs := make([]string, 0, len(values))
		for v := range values {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		d := strings.Join(vs, " or ")
		if ks := perKind[path]; len(ks) > 0 && len(ks) < len(kinds) {
			sort.Strings(ks)
			d += " (" + strings.Join(slices.Compact(ks), ", ") + ")"
		}
		out[path] = d
	}
	return out
}

// collectSettings emits the defaults of each kind's own settings: of a
// device, of a poll group and of a tag. A kind's default may follow the
// device's name or data_dir (opcua's cert_file): the kind's Defaults run
// under the placeholders <device> and <data_dir>.
func collectSettings(kinds []string, emit func(path, value string)) {
	placeholder := &Config{DataDir: "<data_dir>"}
	for _, k := range kinds {
		spec := LookupKind(k)
		d := &Device{Kind: k, Groups: []*PollGroup{{Tags: []*Tag{{}}}}}
		spec.ensureSettings(d)
		if spec.Defaults != nil {
			spec.Defaults(placeholder, "<device>", d)
		}
		for at, s := range map[string]any{"": d.Settings, ".groups[*]": d.Groups[0].Settings, ".groups[*].tags[*]": d.Groups[0].Tags[0].Settings} {
			if s != nil {
				collect(reflect.ValueOf(s), "devices."+k+at, emit)
			}
		}
	}
}

// collect calls emit for every non-zero scalar below v with its key path.
func collect(v reflect.Value, path string, emit func(path, value string)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			collect(v.Elem(), path, emit)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(BrokerHealth{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if opts == "inline" {
				collect(v.Field(i), path, emit)
				continue
			}
			collect(v.Field(i), join(path, name), emit)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			collect(v.MapIndex(k), join(path, k.String()), emit)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			collect(v.Index(i), path+"[*]", emit)
		}
	default:
		if v.IsZero() {
			return
		}
		if v.Type() == reflect.TypeOf(Duration(0)) {
			emit(path, admission.FormatSeconds(time.Duration(v.Int())))
			return
		}
		emit(path, fmt.Sprint(v.Interface()))
	}
}
