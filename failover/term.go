package failover

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// ErrActivation reports a transport that did not open within its
// disclosed activation bound.
var ErrActivation = errors.New("failover: activation failed")

// opened is one transport of a term, in the order it was opened.
type opened struct {
	t      transports.Transport
	isMQTT bool
	name   string // the device's or broker's configuration name
}

// term is one ownership of a session: the transports it opened and the
// route workers running on them. A term's transports are built fresh (the
// first term's devices by Preflight, unopened), used once and closed;
// nothing survives into the next term.
type term struct {
	s       *session
	epoch   uint64
	owner   string
	devices map[string]transports.Transport
	brokers map[string]*mqtt.Client
	bridges []*mqtt.Bridge
	writers []*writer
	order   []opened
	// h tracks the ownership's paths; nil in Preflight.
	h *pathHealth
	// unclaim gives up the term's endpoint claims (failover/claims.go);
	// called once its transports have closed.
	unclaim func()

	// pending holds the poll routes that have not yet published a first
	// good value; ServiceLevelFull is reached when it is empty after
	// activation.
	mu        sync.Mutex
	pending   map[string]bool
	activated bool
	fullOnce  sync.Once
	fullCh    chan struct{}
}

// build creates the term's transports and registers every subscription;
// nothing is connected yet.
func (s *session) build(epoch uint64, owner string) (*term, error) {
	return s.buildWith(epoch, owner, builders{device: func(name string, dev *routes.Device) (transports.Transport, error) {
		if tr := s.sup.o.Built.take(name); tr != nil {
			return tr, nil
		}
		return newDevice(name, dev)
	}})
}

// newDevice builds the transport of the device entry name.
func newDevice(name string, dev *routes.Device) (transports.Transport, error) {
	return transports.New(dev.Kind, dev.Kind+":"+name, dev)
}

// builders say how a term's transports are built: a term builds its own
// devices; Preflight hands in the ones it already built, so each is built
// once, and may build brokers without the deployment's files.
type builders struct {
	device func(string, *routes.Device) (transports.Transport, error)
	// allowMissing builds a broker whose TLS or password input is missing
	// (mqtt.Config.AllowMissingInputs): admit, away from the deployment.
	allowMissing bool
}

// buildWith is build with the transports made as b says.
func (s *session) buildWith(epoch uint64, owner string, b builders) (*term, error) {
	t := &term{s: s, epoch: epoch, owner: owner, devices: map[string]transports.Transport{},
		brokers: map[string]*mqtt.Client{}, pending: map[string]bool{}, fullCh: make(chan struct{})}
	cfg := s.sup.o.Config
	broker := func(name string) (*mqtt.Client, error) {
		if c, ok := t.brokers[name]; ok {
			return c, nil
		}
		c, err := mqtt.New("mqtt:"+name, mqtt.Config{Broker: *cfg.Brokers[name], Session: s.name, Node: s.sup.o.Node,
			CleanSession: s.cleanSession(name), AllowMissingInputs: b.allowMissing})
		if err != nil {
			return nil, err
		}
		c.SetIdentity(mqtt.Identity{Owner: owner, Epoch: epoch})
		t.brokers[name] = c
		return c, nil
	}
	// Open order follows the session's transports as routes.Config.Sessions
	// lists them: devices, remote brokers, local brokers.
	var devs, remotes, locals []string
	seen := map[string]bool{}
	add := func(list *[]string, key string) {
		if !seen[key] {
			seen[key] = true
			*list = append(*list, key)
		}
	}
	for _, r := range s.routes {
		switch r.Kind {
		case routes.RoutePoll, routes.RouteWrite:
			add(&devs, r.Device)
		case routes.RouteBridge:
			add(&remotes, r.Remote)
		}
		add(&locals, r.Broker)
	}
	for _, name := range devs {
		tr, err := b.device(name, cfg.Devices[name])
		if err != nil {
			return nil, &entryError{path: "devices." + name, what: fmt.Sprintf("session %s: device %s", s.name, name), err: err}
		}
		t.devices[name] = tr
		t.order = append(t.order, opened{t: tr, name: name})
	}
	for _, name := range append(remotes, locals...) {
		c, err := broker(name)
		if err != nil {
			return nil, &entryError{path: "brokers." + name, what: fmt.Sprintf("session %s: broker %s", s.name, name), err: err}
		}
		if !slices.ContainsFunc(t.order, func(o opened) bool { return o.t == c }) {
			t.order = append(t.order, opened{t: c, isMQTT: true, name: name})
		}
	}
	for _, r := range s.routes {
		switch r.Kind {
		case routes.RoutePoll:
			t.pending[r.Name] = true
		case routes.RouteWrite:
			w := newWriter(t, r)
			t.writers = append(t.writers, w)
			// Acknowledged only once answered (docs/writes.md).
			if err := t.brokers[r.Broker].Subscribe(mqtt.Subscription{Filter: r.RequestTopic, QoS: byte(r.QoS), ManualAck: true, Handler: w.enqueue}); err != nil {
				return nil, s.routeError(r, err)
			}
		case routes.RouteBridge:
			b, err := mqtt.NewBridge(r.Name, t.brokers[r.Remote], t.brokers[r.Broker], r.Topics)
			if err != nil {
				return nil, s.routeError(r, err)
			}
			b.RefuseRetainedInto(commandFilters(cfg, r.Broker), commandFilters(cfg, r.Remote))
			t.bridges = append(t.bridges, b)
		}
	}
	return t, nil
}

// entryError is a transport that could not be built from its
// configuration entry; path is the entry's key path (devices.NAME,
// brokers.NAME, routes[i]), so the error can point at its line.
type entryError struct {
	path, what string
	err        error
}

func (e *entryError) Error() string { return e.what + ": " + e.err.Error() }
func (e *entryError) Unwrap() error { return e.err }

func (s *session) routeError(r *routes.Route, err error) error {
	return &entryError{path: fmt.Sprintf("routes[%d]", slices.Index(s.sup.o.Config.Routes, r)),
		what: fmt.Sprintf("session %s: route %s", s.name, r.Name), err: err}
}

// Preflight builds every session's transports as an ownership term will,
// opening none of them, so that a device, broker or route setting only a
// transport checks is refused with its file and line before anything runs
// (by admit and by run), not at the first activation, where a term would
// retry it while holding the lease. With needFiles false, a file a
// transport reads as it is built (a CA, certificate, key or password file)
// or a password_env variable may be missing: admit runs in CI, away from
// the deployment's files and environment, and run checks them.
//
// Each device is built once. The result, never nil (also with errors),
// carries the activation and close bounds every built transport reports
// of itself, and its Admit sums those: the budget admission prints is the
// one the transports keep.
func Preflight(cfg *routes.Config, needFiles bool) (*Built, routes.Errors) {
	sv := &Supervisor{o: Options{Config: cfg}}
	byName := routesBySession(cfg)
	p := &preflight{cfg: cfg, needFiles: needFiles, seen: map[string]bool{}}
	built := &Built{cfg: cfg, bounds: routes.Bounds{}, devices: map[string]transports.Transport{}}
	// Every device on its own first, so that each bad one is reported and
	// not only a session's first; the sessions reuse what was built.
	devices := map[string]builtDevice{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Devices)) {
		tr, err := newDevice(name, cfg.Devices[name])
		devices[name] = builtDevice{tr, err}
		p.fail("devices."+name, err)
		if err == nil {
			built.bounds["devices."+name] = boundsOf(tr)
			built.devices[name] = tr
		}
	}
	reuse := builders{allowMissing: !needFiles, device: func(name string, _ *routes.Device) (transports.Transport, error) {
		return devices[name].t, devices[name].err
	}}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		s := &session{sup: sv, name: name, routes: byName[name]}
		t, err := s.buildWith(0, "", reuse)
		if err != nil {
			p.sessionError(err)
			continue
		}
		// A broker's client is the session's own (its client id), its
		// bounds those of the broker entry, whichever session built it.
		for bn, c := range t.brokers {
			built.bounds["brokers."+bn] = boundsOf(c)
		}
	}
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
	return built, p.errs
}

// boundsOf is what a built transport reports of its bounds, under its
// own name.
func boundsOf(tr transports.Transport) admission.Activation {
	return admission.Activation{Name: tr.Name(), Bound: tr.ActivationBound(), Close: tr.CloseBound()}
}

// Built is a configuration whose transports Preflight built, none opened.
type Built struct {
	cfg    *routes.Config
	bounds routes.Bounds

	mu sync.Mutex
	// devices are the device transports built and not yet handed to a
	// term (take).
	devices map[string]transports.Transport
}

// take hands out the transport Preflight built for device name, once: the
// first term of its session opens it instead of building the device
// again (Options.Built). Nil when there is none left, or b is nil.
func (b *Built) take(name string) transports.Transport {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tr := b.devices[name]
	delete(b.devices, name)
	return tr
}

// Sessions reduces the configuration's routes to sessions
// (routes.Config.Sessions) whose transports carry the bounds the built
// transports report.
func (b *Built) Sessions() []routes.Session { return b.cfg.Sessions(b.bounds) }

// Admit evaluates every session with those bounds. It opens nothing.
func (b *Built) Admit() []admission.Report { return routes.AdmitSessions(b.Sessions()) }

// Admit is Preflight then Built.Admit, for a caller that needs only the
// reports and the configuration's problems.
func Admit(cfg *routes.Config, needFiles bool) ([]admission.Report, routes.Errors) {
	b, errs := Preflight(cfg, needFiles)
	return b.Admit(), errs
}

// builtDevice is a device's transport as Preflight built it, or the error.
type builtDevice struct {
	t   transports.Transport
	err error
}

// preflight collects Preflight's problems, each entry's once.
type preflight struct {
	cfg       *routes.Config
	needFiles bool
	seen      map[string]bool
	errs      routes.Errors
}

// fail records err at the entry path, unless it is a missing file admit
// may ignore or the entry already failed.
func (p *preflight) fail(path string, err error) {
	if err == nil || (!p.needFiles && routes.DeploymentInput(err)) || p.seen[path] {
		return
	}
	p.seen[path] = true
	p.errs = append(p.errs, p.cfg.ErrorAt(path, err.Error()))
}

// sessionError records a session whose term could not be built.
func (p *preflight) sessionError(err error) {
	var ee *entryError
	if !errors.As(err, &ee) {
		if p.needFiles || !routes.DeploymentInput(err) {
			p.errs = append(p.errs, &routes.FieldError{File: p.cfg.File, Message: err.Error()})
		}
		return
	}
	// A broker or route several sessions share fails once.
	p.fail(ee.path, ee.err)
}

// cleanSession decides whether the session's MQTT session on a broker is
// discarded at every connect: never. Bridge traffic and write requests
// published while no owner is connected wait on the broker for the next
// owner (same client id); a write request is judged by its age when it
// arrives (docs/writes.md), so a queued command is executed only while
// fresh.
func (s *session) cleanSession(string) bool { return false }

// openBounded opens tr under ctx and gives up at its activation bound even
// if the transport overruns it, closing whatever it left behind.
func openBounded(ctx context.Context, tr transports.Transport) error {
	bound := tr.ActivationBound()
	done := make(chan error, 1)
	go func() { done <- tr.Open(ctx) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrActivation, tr.Name(), err)
		}
		return nil
	case <-timer.C:
		closeBounded(tr)
		return fmt.Errorf("%w: %s did not open within its activation bound %s", ErrActivation, tr.Name(), bound)
	}
}

// closeBounded closes tr within its close bound.
func closeBounded(tr transports.Transport) error {
	ctx, cancel := context.WithTimeout(context.Background(), tr.CloseBound())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tr.Close(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s: close exceeded its bound %s", tr.Name(), tr.CloseBound())
	}
}

// open activates every transport in order, telling the ownership's path
// tracker which path is opening and how it went; on failure it closes what
// was opened.
func (t *term) open(ctx context.Context) error {
	for i, o := range t.order {
		kind := pathDevice
		if o.isMQTT {
			kind = pathBroker
		}
		t.h.beginOpen(kind, o.name)
		began := time.Now()
		err := openBounded(ctx, o.t)
		t.h.endOpen(kind, o.name, err, time.Now())
		t.s.log.Debug("activation: transport opened", "transport", o.t.Name(), "took", time.Since(began).String(), "err", err)
		if err != nil {
			t.s.sup.o.Metrics.TransportErrors.WithLabelValues(t.s.name, o.t.Name(), "open").Inc()
			t.closeFirst(i)
			return err
		}
	}
	return nil
}

// close closes every transport in reverse order, each within its bound.
func (t *term) close() {
	t.closeFirst(len(t.order))
}

func (t *term) closeFirst(n int) {
	for i := n - 1; i >= 0; i-- {
		tr := t.order[i].t
		began := time.Now()
		if err := closeBounded(tr); err != nil {
			t.s.sup.o.Metrics.TransportErrors.WithLabelValues(t.s.name, tr.Name(), "close").Inc()
			t.s.log.Warn("close", "transport", tr.Name(), "err", err)
		}
		t.s.log.Debug("close: transport closed", "transport", tr.Name(), "took", time.Since(began).String())
	}
}

// markActivated records that every transport opened.
func (t *term) markActivated() {
	t.mu.Lock()
	t.activated = true
	t.mu.Unlock()
	t.checkFull()
}

// markPublished records a poll route's first good publication.
func (t *term) markPublished(route string) {
	t.mu.Lock()
	delete(t.pending, route)
	t.mu.Unlock()
	t.s.log.Debug("first good value published", "route", route, "epoch", t.epoch)
	t.checkFull()
}

// isFull reports whether the term has reached ServiceLevelFull once.
func (t *term) isFull() bool {
	select {
	case <-t.fullCh:
		return true
	default:
		return false
	}
}

func (t *term) checkFull() {
	t.mu.Lock()
	full := t.activated && len(t.pending) == 0
	t.mu.Unlock()
	if full {
		t.fullOnce.Do(func() { close(t.fullCh) })
	}
}

// brokerState is the session's broker path as one state: converged when
// every MQTT transport is, and otherwise not converged since the earliest
// instant one of them lost convergence.
func (t *term) brokerState() transports.State {
	st := transports.State{Converged: true}
	for _, o := range t.order {
		if !o.isMQTT {
			continue
		}
		s := o.t.State()
		if !s.Converged && (st.Converged || s.Since.Before(st.Since)) {
			st = transports.State{Converged: false, Since: s.Since, Err: s.Err}
		}
	}
	return st
}
