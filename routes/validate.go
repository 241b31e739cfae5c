package routes

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/redact"
)

// ErrorAt builds a FieldError with message at the position of path (a key
// path such as devices.press-1 or routes[3]), for a check made outside this
// package, such as a transport's own validation.
func (c *Config) ErrorAt(path, message string) *FieldError {
	return c.errAt(path, "%s", message)
}

// ErrorAtf is ErrorAt with a formatted message whose string arguments, a
// written value perhaps megabytes long, are clipped as this package's own
// messages are, so the rule after them stays readable.
func (c *Config) ErrorAtf(path, format string, args ...any) *FieldError {
	return c.errAt(path, format, args...)
}

// errAt builds a FieldError at the position of path, or of its nearest
// written parent when path itself was defaulted.
func (c *Config) errAt(path, format string, args ...any) *FieldError {
	fe := &FieldError{File: c.File, Path: clip(path), Message: fmt.Sprintf(format, clipArgs(args)...)}
	for p := path; ; {
		if at, ok := c.positions[p]; ok {
			fe.Line, fe.Column = at.line, at.col
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			// A key missing at the top level: the document's own position.
			if at, ok := c.positions[""]; ok {
				fe.Line, fe.Column = at.line, at.col
			}
			break
		}
		p = p[:i]
	}
	return fe
}

var (
	// TagTypes are the value types a tag may have, the one list the
	// device transports check against (Modbus registers hold no 8-bit
	// types).
	TagTypes = []string{"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64", "string"}
)

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// validate checks every rule that does not need admission arithmetic.
func (c *Config) validate() Errors {
	var errs Errors
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }

	switch c.DeploymentMode {
	case admission.Standalone, admission.Clustered:
	default:
		add("deployment_mode", "unknown deployment_mode %q: want standalone or clustered", c.DeploymentMode)
	}
	if c.DeploymentMode == admission.Clustered && len(c.LeaseStore.Endpoints) == 0 && c.LeaseStore.Kubernetes == nil && !c.StoreMembers() {
		add("lease_store.endpoints", "clustered mode needs the etcd endpoints every bridge shares, or lease_store.members; the embedded store serves a standalone node only")
	}
	errs = append(errs, c.checkStore()...)
	for i, ep := range c.LeaseStore.Endpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(fmt.Sprintf("lease_store.endpoints[%d]", i), "endpoint %q: want http://host:port or https://host:port", redact.URL(ep))
		}
	}
	if !strings.HasSuffix(c.LeaseStore.KeyPrefix, "/") {
		add("lease_store.key_prefix", "key_prefix %q must end with / so one session's key is never a prefix of another's", c.LeaseStore.KeyPrefix)
	}
	errs = append(errs, c.CheckCredentials("lease_store", c.LeaseStore.Credentials, c.LeaseStore.TLS)...)
	errs = append(errs, c.checkKubernetesStore()...)
	if t := c.LeaseStore.MemberTLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		add("lease_store.member_tls", "cert_file and key_file go together: set both or neither")
	}
	errs = append(errs, c.checkManager("manager", &c.Manager)...)

	for _, name := range sortedKeys(c.Brokers) {
		errs = append(errs, c.checkBroker("brokers."+name, c.Brokers[name])...)
	}
	for _, name := range sortedKeys(c.Devices) {
		errs = append(errs, c.checkDevice("devices."+name, c.Devices[name])...)
	}
	if len(c.Routes) == 0 && !c.StoreMembers() {
		add("routes", "no routes: a configuration needs at least one route (a witness's file, with lease_store.members, needs none)")
	}
	names := map[string]int{}
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		if r == nil {
			add(p, "empty route")
			continue
		}
		if r.Name == "" {
			add(p, "route has no name: every route needs a unique name (errors and divergence reports cite it)")
		} else if first, dup := names[r.Name]; dup {
			add(p+".name", "duplicate route name %q (first in routes[%d])", r.Name, first)
		} else {
			names[r.Name] = i
		}
		errs = append(errs, c.checkRoute(p, r)...)
		errs = append(errs, c.checkRouteTopics(p, r)...)
	}
	for _, name := range sortedKeys(c.Brokers) {
		if b := c.Brokers[name]; b != nil && b.StatusTopic != "" {
			if err := checkTopicName(b.StatusTopic); err != nil {
				add("brokers."+name+".status_topic", "%v", err)
			}
		}
	}
	errs = append(errs, c.checkPins()...)
	return append(errs, c.checkClientIDs()...)
}

// checkClientIDs refuses two broker entries of one session that reach the
// same URL with the same client id: the broker would let each connection
// take the other's place, over and over.
func (c *Config) checkClientIDs() Errors {
	var errs Errors
	type use struct {
		name  string
		route int
	}
	bySession := map[string][]use{}
	for i, r := range c.Routes {
		if r == nil {
			continue
		}
		for _, b := range []string{r.Broker, r.Remote} {
			if c.Brokers[b] != nil {
				bySession[r.Session] = append(bySession[r.Session], use{b, i})
			}
		}
	}
	for _, session := range sortedKeys(bySession) {
		seen := map[string]string{} // url + client id -> broker name
		for _, u := range bySession[session] {
			b := c.Brokers[u.name]
			id := ClientID(b.ClientID, session, c.Node)
			key := b.URL + " " + id
			if other, ok := seen[key]; ok && other != u.name {
				errs = append(errs, c.errAt(fmt.Sprintf("routes[%d]", u.route),
					"session %q uses brokers %q and %q, both %s with client id %q: the broker would disconnect one for the other; give one a different client_id",
					session, other, u.name, redact.URL(b.URL), id))
				continue
			}
			seen[key] = u.name
		}
	}
	return errs
}

// CheckCredentials reports the rules of the credentials (and client TLS,
// when tls is not nil) of the entry at path: one password source, and a
// user name with it. Brokers, the lease store and device kinds with a
// user share it.
func (c *Config) CheckCredentials(path string, cr Credentials, tls *TLS) Errors {
	var errs Errors
	if cr.PasswordFile != "" && cr.PasswordEnv != "" {
		errs = append(errs, c.errAt(path+".password_env", "set password_file or password_env, not both"))
	}
	if (cr.PasswordFile != "" || cr.PasswordEnv != "") && cr.Username == "" {
		errs = append(errs, c.errAt(path+".username", "a password is configured but no username"))
	}
	if tls != nil && (tls.CertFile == "") != (tls.KeyFile == "") {
		errs = append(errs, c.errAt(path+".tls", "cert_file and key_file go together: set both or neither"))
	}
	return errs
}

func (c *Config) checkManager(path string, m *Manager) Errors {
	var errs Errors
	if m.MaxRenewFails != nil && *m.MaxRenewFails < 1 {
		errs = append(errs, c.errAt(path+".max_renew_fails", "max_renew_fails = %d: must be >= 1", *m.MaxRenewFails))
	}
	for key, d := range map[string]*Duration{
		"lease_ttl": m.LeaseTTL, "renew_interval": m.RenewInterval, "renew_call_timeout": m.RenewCallTimeout,
		"acquire_poll_interval": m.AcquirePollInterval, "failover_slo": m.FailoverSLO,
	} {
		if d != nil && *d == 0 {
			errs = append(errs, c.errAt(path+"."+key, "%s = 0s: must be > 0", key))
		}
	}
	return errs
}

func (c *Config) checkBroker(path string, b *Broker) Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if b == nil {
		add(path, "empty broker")
		return errs
	}
	u, err := url.Parse(b.URL)
	switch {
	case b.URL == "":
		add(path+".url", "url is required, such as tcp://127.0.0.1:1883")
	case err != nil || u.Host == "" || u.Port() == "":
		add(path+".url", "url %q: want scheme://host:port", redact.URL(b.URL))
	case !slices.Contains([]string{"tcp", "mqtt", "ssl", "tls", "mqtts", "ws", "wss"}, u.Scheme):
		add(path+".url", "url %q: scheme %q unsupported: want tcp, mqtt, ssl, tls, mqtts, ws or wss", redact.URL(b.URL), u.Scheme)
	}
	switch b.ProtocolVersion {
	case 3, 4:
	case 5:
		add(path+".protocol_version", "protocol_version 5: the paho.mqtt.golang client speaks MQTT 3.1 (3) and 3.1.1 (4) only; the session epoch travels in the payload instead of an MQTT 5 user property")
	default:
		add(path+".protocol_version", "protocol_version %d: want 3 (MQTT 3.1) or 4 (MQTT 3.1.1)", b.ProtocolVersion)
	}
	if _, err := admission.MQTTActivationBound(b.ConnectTimeout.D(), b.ReconcileTimeout.D(), b.UnmatchedGrace.D()); err != nil {
		add(path, "activation bound 3*connect_timeout + 3*reconcile_timeout + 2*unmatched_grace: %v", err)
	}
	if b.KeepAlive.D() < 0 || b.KeepAlive.D()%1e9 != 0 {
		add(path+".keepalive", "keepalive %s: MQTT counts it in whole seconds", admission.FormatSeconds(b.KeepAlive.D()))
	}
	errs = append(errs, c.CheckCredentials(path, b.Credentials, b.TLS)...)
	return errs
}

func (c *Config) checkDevice(path string, d *Device) Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if d == nil {
		add(path, "empty device")
		return errs
	}
	if d.Address == "" {
		add(path+".address", "address is required")
	}
	if d.ConnectTimeout.D() > math.MaxInt64-d.RequestTimeout.D() {
		add(path, "activation bound connect_timeout + request_timeout overflows")
	}
	k := LookupKind(d.Kind)
	if k == nil {
		add(path+".kind", "unknown device kind %q: want %s", d.Kind, strings.Join(Kinds(), ", "))
		return errs
	}
	if k.Check != nil {
		errs = append(errs, k.Check(c, path, d)...)
	}
	groups, tags := map[string]bool{}, map[string]string{}
	for i, g := range d.Groups {
		gp := fmt.Sprintf("%s.groups[%d]", path, i)
		if g == nil {
			add(gp, "empty group")
			continue
		}
		if g.Name == "" {
			add(gp, "group has no name")
		} else if groups[g.Name] {
			add(gp+".name", "duplicate group name %q", g.Name)
		}
		groups[g.Name] = true
		if g.Interval.D() <= 0 {
			add(gp+".interval", "interval must be > 0")
		}
		switch {
		case g.Mode == "subscribe" && !k.Subscribe:
			add(gp+".mode", "mode subscribe is for %s devices; %s devices are polled", strings.Join(subscribeKinds(), "/"), d.Kind)
		case g.Mode != "poll" && g.Mode != "subscribe":
			add(gp+".mode", "mode %q: want poll or subscribe", g.Mode)
		}
		for j, t := range g.Tags {
			tp := fmt.Sprintf("%s.tags[%d]", gp, j)
			if t == nil {
				add(tp, "empty tag")
				continue
			}
			if t.Name == "" {
				add(tp, "tag has no name")
			} else if first, dup := tags[t.Name]; dup {
				add(tp+".name", "duplicate tag name %q on this device (first at %s)", t.Name, first)
			} else {
				tags[t.Name] = tp
			}
			errs = append(errs, c.checkTag(tp, d, k, t)...)
		}
	}
	return errs
}

// checkTag applies the rules common to every tag, then its kind's (only
// to a tag that passed them when the kind checks the whole tag).
func (c *Config) checkTag(path string, d *Device, k *DeviceKind, t *Tag) Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if t.Address == "" {
		add(path+".address", "address is required")
	}
	if t.Type == "" {
		add(path+".type", "type is required: one of %s", strings.Join(TagTypes, ", "))
	} else if !slices.Contains(TagTypes, t.Type) {
		add(path+".type", "type %q: want one of %s", t.Type, strings.Join(TagTypes, ", "))
	}
	if t.Type == "string" && t.Length <= 0 {
		add(path+".length", "a string tag needs length > 0 (registers for Modbus, bytes for S7)")
	}
	if t.Scale != nil && *t.Scale == 0 {
		add(path+".scale", "scale 0 would erase every value")
	}
	if t.Deadband < 0 {
		add(path+".deadband", "deadband must be >= 0")
	}
	if k.CheckTag != nil && (len(errs) == 0 || !k.WholeTag) {
		errs = append(errs, k.CheckTag(c, path, d, t)...)
	}
	return errs
}

// checkRouteTopics applies MQTT's topic rules: topics published to hold no
// wildcards, subscription filters use them only as whole levels.
func (c *Config) checkRouteTopics(path string, r *Route) Errors {
	var errs Errors
	check := func(key, t string, rule func(string) error) {
		if t == "" {
			return // a missing topic is checkRoute's (or a default applies)
		}
		if err := rule(t); err != nil {
			errs = append(errs, c.errAt(path+"."+key, "%v", err))
		}
	}
	switch r.Kind {
	case RoutePoll:
		check("topic", r.Topic, checkTopicName)
	case RouteWrite:
		check("request_topic", r.RequestTopic, checkTopicFilter)
		check("reply_topic", r.ReplyTopic, checkTopicName)
	case RouteBridge:
		for i, m := range r.Topics {
			if m == nil {
				continue
			}
			mp := fmt.Sprintf("topics[%d]", i)
			check(mp+".from", m.From, checkTopicFilter)
			check(mp+".to", m.To, checkTopicName)
		}
	}
	return errs
}

// checkRoute checks route r at path: what every route needs, then what
// its kind needs (checkDeviceRoute, checkBridgeRoute).
func (c *Config) checkRoute(path string, r *Route) Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if r.Session == "" {
		add(path, "session is required: it names the lease this route runs under")
	} else if strings.ContainsAny(r.Session, "/ \t\n") {
		add(path+".session", "session %q: no slashes or spaces (it is an etcd key segment)", r.Session)
	}
	if r.QoS < 0 || r.QoS > 2 {
		add(path+".qos", "qos %d: want 0, 1 or 2", r.QoS)
	}
	if r.Broker == "" {
		add(path, "broker is required: the (local) MQTT broker of this route")
	} else if c.Brokers[r.Broker] == nil {
		add(path+".broker", "unknown broker %q (defined: %s)", r.Broker, strings.Join(sortedKeys(c.Brokers), ", "))
	}
	errs = append(errs, c.checkManager(path+".manager", &r.Manager)...)
	switch r.Kind {
	case RoutePoll, RouteWrite:
		c.checkDeviceRoute(path, r, add)
	case RouteBridge:
		c.checkBridgeRoute(path, r, add)
	case "":
		add(path, "kind is required: poll, write or bridge")
	default:
		add(path+".kind", "unknown route kind %q: want poll, write or bridge", r.Kind)
	}
	for _, k := range []string{"max_age", "clock_skew"} {
		if r.Kind != RouteWrite && c.Written(path+"."+k) {
			add(path+"."+k, "%s applies to write routes only", k)
		}
	}
	return errs
}

// checkDeviceRoute checks the keys of a poll or write route r at path, and
// adds what it finds: its device, and a poll route's publish and groups or
// a write route's topics and max_age.
func (c *Config) checkDeviceRoute(path string, r *Route, add func(p, format string, args ...any)) {
	dev := c.Devices[r.Device]
	if r.Device == "" {
		add(path, "device is required for a %s route", r.Kind)
	} else if dev == nil {
		add(path+".device", "unknown device %q (defined: %s)", r.Device, strings.Join(sortedKeys(c.Devices), ", "))
	}
	if r.Kind == RoutePoll {
		if r.Publish != "on_change" && r.Publish != "every_poll" {
			add(path+".publish", "publish %q: want on_change or every_poll", r.Publish)
		}
		for i, g := range r.Groups {
			if dev != nil && !slices.ContainsFunc(dev.Groups, func(pg *PollGroup) bool { return pg != nil && pg.Name == g }) {
				add(fmt.Sprintf("%s.groups[%d]", path, i), "device %q has no group %q", r.Device, g)
			}
		}
		return
	}
	if r.RequestTopic == "" {
		add(path, "request_topic is required for a write route")
	}
	if r.ReplyTopic == "" {
		add(path, "reply_topic is required for a write route")
	}
	if r.MaxAge <= 0 {
		add(path+".max_age", "max_age %s: want a duration above 0", r.MaxAge.D())
	}
}

// checkBridgeRoute checks the keys of a bridge route r at path, and adds
// what it finds: its remote broker and its topic mappings.
func (c *Config) checkBridgeRoute(path string, r *Route, add func(p, format string, args ...any)) {
	if r.Remote == "" {
		add(path, "remote is required for a bridge route: the remote broker")
	} else if c.Brokers[r.Remote] == nil {
		add(path+".remote", "unknown broker %q (defined: %s)", r.Remote, strings.Join(sortedKeys(c.Brokers), ", "))
	} else if r.Remote == r.Broker {
		add(path+".remote", "remote and broker are both %q: a bridge joins two brokers", r.Remote)
	}
	if len(r.Topics) == 0 {
		add(path, "topics is required for a bridge route")
	}
	for i, m := range r.Topics {
		mp := fmt.Sprintf("%s.topics[%d]", path, i)
		if m == nil {
			add(mp, "empty topic mapping")
			continue
		}
		if m.From == "" {
			add(mp, "from is required")
		}
		if m.Direction != "in" && m.Direction != "out" {
			add(mp+".direction", "direction %q: want in (remote to local) or out", m.Direction)
		}
		if m.QoS < 0 || m.QoS > 2 {
			add(mp+".qos", "qos %d: want 0, 1 or 2", m.QoS)
		}
	}
}
