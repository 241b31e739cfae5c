package routes

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Session is one unit of exclusivity with the canonical manager inputs every
// route naming it agrees on.
type Session struct {
	Name string
	// Routes names the session's routes, sorted.
	Routes []string
	// Inputs are valid only when Refusals is empty.
	Inputs admission.Inputs
	// Refusals are divergences between routes and timing that cannot be
	// derived; admission adds its own.
	Refusals []string
	// Shared are refusals for a device or endpoint the session shares
	// with another session or device entry (docs/devices.md, exclusive
	// endpoints); unlike Refusals they leave the budgets computed.
	Shared []string
}

// routeInputs is what one route alone says its session's manager inputs
// are, after defaults and profiles.
type routeInputs struct {
	route  *Route
	index  int
	inputs admission.Inputs
	err    error
}

func pick[T any](route, file *T) *T {
	if route != nil {
		return route
	}
	return file
}

func durPtr(d *Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.D()
	return &v
}

// effective merges a route's manager block over the file's defaults.
func (c *Config) effective(r *Route) Manager {
	f, m := c.Manager, r.Manager
	return Manager{
		LeaseTTL:             pick(m.LeaseTTL, f.LeaseTTL),
		RenewInterval:        pick(m.RenewInterval, f.RenewInterval),
		LeaseRenewJitter:     pick(m.LeaseRenewJitter, f.LeaseRenewJitter),
		RenewCallTimeout:     pick(m.RenewCallTimeout, f.RenewCallTimeout),
		AcquirePollInterval:  pick(m.AcquirePollInterval, f.AcquirePollInterval),
		MaxRenewFails:        pick(m.MaxRenewFails, f.MaxRenewFails),
		StepDownGrace:        pick(m.StepDownGrace, f.StepDownGrace),
		BrokerHealthStepDown: pick(m.BrokerHealthStepDown, f.BrokerHealthStepDown),
		DevicePathStepDown:   pick(m.DevicePathStepDown, f.DevicePathStepDown),
		DevicePathCooldown:   pick(m.DevicePathCooldown, f.DevicePathCooldown),
		StartupAllowance:     pick(m.StartupAllowance, f.StartupAllowance),
		FailoverSLO:          pick(m.FailoverSLO, f.FailoverSLO),
	}
}

// storeTiming is the raft timing admission charges the store's recovery
// from when the fleet runs its lease store itself (lease_store.members):
// a node's death can then take the store's leader with it. Nil otherwise.
func (c *Config) storeTiming() *admission.Store {
	if len(c.LeaseStore.Members) == 0 {
		return nil
	}
	return &admission.Store{HeartbeatInterval: c.LeaseStore.HeartbeatInterval.D(), ElectionTimeout: c.LeaseStore.ElectionTimeout.D()}
}

// Bounds are the activation and close bounds of the transports built from
// a configuration's devices and brokers, keyed by entry ("devices.plc",
// "brokers.local"), each named as its transport names itself. routes holds
// no bound formula: preflight.Build builds every transport and fills
// Bounds from what each reports of itself, so admission sums the bounds
// the transports keep.
type Bounds map[string]admission.Activation

// entries lists the configuration entries a route opens as owner, in a
// canonical order: the device first, then the remote broker, then the
// local broker.
func (c *Config) entries(r *Route) []string {
	var out []string
	if c.Devices[r.Device] != nil && (r.Kind == RoutePoll || r.Kind == RouteWrite) {
		out = append(out, "devices."+r.Device)
	}
	if c.Brokers[r.Remote] != nil && r.Kind == RouteBridge {
		out = append(out, "brokers."+r.Remote)
	}
	if c.Brokers[r.Broker] != nil {
		out = append(out, "brokers."+r.Broker)
	}
	return out
}

func (c *Config) routeInputs(i int, r *Route) routeInputs {
	m := c.effective(r)
	t, err := admission.ResolveTiming(c.DeploymentMode, admission.Overrides{
		LeaseTTL:            durPtr(m.LeaseTTL),
		RenewInterval:       durPtr(m.RenewInterval),
		RenewJitter:         durPtr(m.LeaseRenewJitter),
		RenewCallTimeout:    durPtr(m.RenewCallTimeout),
		AcquirePollInterval: durPtr(m.AcquirePollInterval),
		StepDownGrace:       durPtr(m.StepDownGrace),
		MaxRenewFails:       m.MaxRenewFails,
	})
	in := admission.Inputs{
		Session:     r.Session,
		Timing:      t,
		FailoverSLO: durPtr(m.FailoverSLO),
	}
	if m.BrokerHealthStepDown != nil {
		in.BrokerHealth = admission.BrokerHealth(*m.BrokerHealthStepDown)
	}
	if m.DevicePathStepDown != nil && m.DevicePathStepDown.Mode == admission.BrokerHealthOn {
		in.DevicePath.Threshold = m.DevicePathStepDown.Threshold
	}
	in.DevicePath.Cooldown = durPtr(m.DevicePathCooldown)
	if m.StartupAllowance != nil {
		in.StartupAllowance = m.StartupAllowance.D()
	}
	return routeInputs{route: r, index: i, inputs: in, err: err}
}

// canonicalFields renders every manager input of one route's view, keyed by
// config field name, so two views can be compared field by field.
func canonicalFields(in admission.Inputs) [][2]string {
	fs := admission.FormatSeconds
	t := in.Timing
	slo := "none"
	if in.FailoverSLO != nil {
		slo = fs(*in.FailoverSLO)
	}
	cooldown := "derived"
	if in.DevicePath.Cooldown != nil {
		cooldown = fs(*in.DevicePath.Cooldown)
	}
	return [][2]string{
		{"lease_ttl", fs(t.LeaseTTL)},
		{"renew_interval", fs(t.RenewInterval)},
		{"lease_renew_jitter", fs(t.RenewJitter)},
		{"renew_call_timeout", fs(t.RenewCallTimeout)},
		{"acquire_poll_interval", fs(t.AcquirePollInterval)},
		{"max_renew_fails", strconv.Itoa(t.MaxRenewFails)},
		{"step_down_grace", fs(t.StepDownGrace)},
		{"broker_health_step_down", in.BrokerHealth.String()},
		{"device_path_step_down", in.DevicePath.String()},
		{"device_path_cooldown", cooldown},
		{"startup_allowance", fs(in.StartupAllowance)},
		{"failover_slo", slo},
	}
}

// Sessions reduces the routes to one canonical set of manager inputs per
// session, sorted by session name. Routes are compared in name order, so the
// result never depends on the order they are written in: every field on
// which two routes of a session disagree becomes a refusal naming the
// session, the field, both routes and both values. The sessions' transports
// carry the bounds b gives for their entries; an entry b lacks (its
// transport could not be built) is a refusal.
func (c *Config) Sessions(b Bounds) []Session {
	by := map[string][]routeInputs{}
	for i, r := range c.Routes {
		by[r.Session] = append(by[r.Session], c.routeInputs(i, r))
	}
	out := make([]Session, 0, len(by))
	shared := c.exclusive()
	for _, name := range sortedKeys(by) {
		views := by[name]
		sort.Slice(views, func(i, j int) bool { return views[i].route.Name < views[j].route.Name })
		s := Session{Name: name, Inputs: views[0].inputs}
		s.Inputs.Spread = c.Spread
		s.Inputs.Store = c.storeTiming()
		for _, v := range views {
			s.Routes = append(s.Routes, v.route.Name)
		}
		var unbuilt []string
		s.Inputs.Transports, unbuilt = c.unionTransports(views, b)
		for _, v := range views {
			if v.err != nil {
				s.Refusals = append(s.Refusals, fmt.Sprintf("route %q (%s): %v", v.route.Name, c.where(v.index), v.err))
			}
		}
		for _, entry := range unbuilt {
			s.Refusals = append(s.Refusals, fmt.Sprintf("%s (%s): its transport was not built, so its bounds are unknown", entry, c.position(entry)))
		}
		if len(s.Refusals) == 0 {
			s.Refusals = c.divergences(name, views)
		}
		s.Shared = shared[name]
		out = append(out, s)
	}
	return out
}

// unionTransports is what a session's owner opens: the endpoint claim when
// it has devices, then every transport any of its routes names, once,
// devices first (the term opens them in that order), each with the bounds
// b gives its entry; unbuilt lists the entries b lacks. Routes of one
// session may use different devices and brokers; admission sums the
// bounds of all of them.
func (c *Config) unionTransports(views []routeInputs, b Bounds) (out []admission.Activation, unbuilt []string) {
	var devices, brokers []admission.Activation
	seen := map[string]bool{}
	for _, v := range views {
		for _, entry := range c.entries(v.route) {
			if seen[entry] {
				continue
			}
			seen[entry] = true
			a, ok := b[entry]
			a.Entry = entry
			switch {
			case !ok:
				unbuilt = append(unbuilt, entry)
			case strings.HasPrefix(entry, "brokers."):
				brokers = append(brokers, a)
			default:
				devices = append(devices, a)
			}
		}
	}
	if len(devices) > 0 {
		// Before opening a device the owner claims its endpoints in the
		// lease store (failover/claims.go), one call within
		// renew_call_timeout: part of the activation it pays.
		c := views[0].inputs.Timing.RenewCallTimeout
		claim := admission.Activation{Name: EndpointClaim, Entry: EndpointClaim, Bound: c,
			Parts: []admission.Part{{Key: "renew_call_timeout", Count: 1, Each: c}}}
		devices = append([]admission.Activation{claim}, devices...)
	}
	return append(devices, brokers...), unbuilt
}

// EndpointClaim names the endpoint-claim call in a session's activation:
// its bound is renew_call_timeout.
const EndpointClaim = "lease:endpoint_claim"

func (c *Config) where(routeIndex int) string {
	return c.position(fmt.Sprintf("routes[%d]", routeIndex))
}

// position prints file:line of a key path.
func (c *Config) position(path string) string {
	fe := c.errAt(path, "")
	return fmt.Sprintf("%s:%d", fe.File, fe.Line)
}

func (c *Config) divergences(session string, views []routeInputs) []string {
	var out []string
	reported := map[string]bool{}
	base := canonicalFields(views[0].inputs)
	for _, v := range views[1:] {
		for i, f := range canonicalFields(v.inputs) {
			if f[1] == base[i][1] {
				continue
			}
			// Report each field once, against the first route by name.
			key := f[0]
			if reported[key] {
				continue
			}
			reported[key] = true
			out = append(out, fmt.Sprintf("session %q: routes disagree on %s: route %q (%s) gives %s, route %q (%s) gives %s; at run time the first route would win, so every route of a session must agree",
				session, key, views[0].route.Name, c.where(views[0].index), base[i][1], v.route.Name, c.where(v.index), f[1]))
		}
	}
	return out
}

// AdmitSessions evaluates sessions already reduced by Config.Sessions, in
// their order, for callers that need both.
func AdmitSessions(sessions []Session) []admission.Report {
	out := make([]admission.Report, 0, len(sessions))
	for _, s := range sessions {
		var r admission.Report
		if len(s.Refusals) > 0 {
			r = admission.Report{Session: s.Name, Timing: s.Inputs.Timing, FailoverSLO: s.Inputs.FailoverSLO, Refusals: s.Refusals,
				BrokerPathFailover: "undecided", DevicePathFailover: s.Inputs.DevicePath.State()}
		} else {
			r = admission.Evaluate(s.Inputs)
		}
		r.Refusals = append(r.Refusals, s.Shared...)
		out = append(out, r)
	}
	return out
}
