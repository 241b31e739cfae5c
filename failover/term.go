package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// ErrActivation reports a transport that did not open within its
// disclosed activation bound.
var ErrActivation = errors.New("failover: activation failed")

// term is one ownership of a session: the transports it opened and the
// route workers running on them (dp, the data plane). A term's transports
// are built fresh (the first term's devices by preflight, unopened), used
// once and closed; nothing survives into the next term.
type term struct {
	s     *session
	epoch uint64
	owner string
	dp    *dataplane.Term
	// h tracks the ownership's paths.
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
// nothing is connected yet. The first term of the session opens the
// devices preflight built (Options.Built); later ones build their own.
func (s *session) build(epoch uint64, owner string) (*term, error) {
	t := &term{s: s, epoch: epoch, owner: owner, pending: map[string]bool{}, fullCh: make(chan struct{})}
	for _, r := range s.routes {
		if r.Kind == routes.RoutePoll {
			t.pending[r.Name] = true
		}
	}
	o := s.sup.o
	dp, err := dataplane.Build(dataplane.Spec{Config: o.Config, Session: s.name, Routes: s.routes, Node: o.Node,
		Owner: owner, Epoch: epoch, Env: t, Device: func(name string, dev *routes.Device) (transports.Transport, error) {
			if tr := o.Built.Take(name); tr != nil {
				return tr, nil
			}
			return dataplane.NewDevice(name, dev)
		}})
	if err != nil {
		return nil, err
	}
	t.dp = dp
	return t, nil
}

// The term is its data plane's Env: what the workers report lands in the
// session's metrics, path tracker and ServiceLevelFull.

// TransportError implements dataplane.Counters.
func (t *term) TransportError(transport, op string) {
	t.s.sup.o.Metrics.TransportErrors.WithLabelValues(t.s.name, transport, op).Inc()
}

// WriteOutcome implements dataplane.Counters.
func (t *term) WriteOutcome(route, outcome string) {
	t.s.sup.o.Metrics.WriteRequests.WithLabelValues(t.s.name, route, outcome).Inc()
}

// TrackBridge implements dataplane.Counters.
func (t *term) TrackBridge(b *mqtt.Bridge) func() {
	return t.s.sup.o.Metrics.Bridges.Track(t.s.name, b)
}

// Values implements dataplane.Counters.
func (t *term) Values(route string) (polled, published dataplane.Counter) {
	m := t.s.sup.o.Metrics
	return m.ValuesPolled.WithLabelValues(t.s.name, route), m.ValuesPublished.WithLabelValues(t.s.name, route)
}

// Device implements dataplane.DeviceHealth.
func (t *term) Device(name string, err error, now time.Time) { t.h.device(name, err, now) }

// Log implements dataplane.Env.
func (t *term) Log() *slog.Logger { return t.s.log }

// Published implements dataplane.Env.
func (t *term) Published(route string) { t.markPublished(route) }

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
	for i, o := range t.dp.Order {
		kind := pathDevice
		if o.IsMQTT {
			kind = pathBroker
		}
		t.h.beginOpen(kind, o.Name)
		began := time.Now()
		err := openBounded(ctx, o.T)
		t.h.endOpen(kind, o.Name, err, time.Now())
		t.s.log.Debug("activation: transport opened", "transport", o.T.Name(), "took", time.Since(began).String(), "err", err)
		if err != nil {
			t.TransportError(o.T.Name(), "open")
			t.closeFirst(i)
			return err
		}
	}
	return nil
}

// close closes every transport in reverse order, each within its bound.
func (t *term) close() {
	t.closeFirst(len(t.dp.Order))
}

func (t *term) closeFirst(n int) {
	for i := n - 1; i >= 0; i-- {
		tr := t.dp.Order[i].T
		began := time.Now()
		if err := closeBounded(tr); err != nil {
			t.TransportError(tr.Name(), "close")
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
	for _, o := range t.dp.Order {
		if !o.IsMQTT {
			continue
		}
		s := o.T.State()
		if !s.Converged && (st.Converged || s.Since.Before(st.Since)) {
			st = transports.State{Converged: false, Since: s.Since, Err: s.Err}
		}
	}
	return st
}
