package failover

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// session runs one session: its lease manager and, while it owns the
// lease, one term after another.
type session struct {
	sup    *Supervisor
	name   string
	report admission.Report
	routes []*routes.Route
	// threshold is broker_health_step_down; 0 when off.
	threshold time.Duration
	// devThreshold is device_path_step_down; 0 when off.
	devThreshold time.Duration
	mgrOpts      lease.Options
	// wrote is every manager's lease.Options.Wrote: set once one of them
	// sent a takeover, after which the row may be this process's.
	wrote atomic.Bool
	log   *slog.Logger

	state    atomic.Value // string, one of States
	conflict atomic.Value // string, see SessionStatus.EndpointConflict
	owned    atomic.Bool
	full     atomic.Bool

	// unclaiming counts endpoint-claim releases under way: a closed
	// term's claims are released beside the row's release, not before
	// it, and the session's stop waits for them.
	unclaiming sync.WaitGroup

	mu       sync.Mutex
	stopTerm chan struct{}  // closed to end the current term gracefully
	termDone chan struct{}  // closed when the current term has closed
	lastFull time.Duration  // last FailureToFullDuration, for tests and logs
	last     lastFailover   // the last takeover's cause and budget
	mgr      *lease.Manager // replaced after a device-path cooldown
	health   *pathHealth    // the current ownership's; nil on a standby
	cooling  bool           // a device-path release ended the manager
	pause    *pause         // a planned handover or drain ended the manager
	pre      *preclaim      // a handover target's claim ahead of its takeover
	timing   timingState    // the row owner's timing against this node's
}

// manager is the session's current lease manager.
func (s *session) manager() *lease.Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mgr
}

func (s *session) setHealth(h *pathHealth) {
	s.mu.Lock()
	s.health = h
	s.mu.Unlock()
}

// deviceNames lists the devices the session's routes use.
func (s *session) deviceNames() []string {
	var out []string
	for _, r := range s.routes {
		if (r.Kind == routes.RoutePoll || r.Kind == routes.RouteWrite) && !slices.Contains(out, r.Device) {
			out = append(out, r.Device)
		}
	}
	return out
}

// newManager makes a standby lease manager for the session, unless the
// supervisor is shutting down.
func (s *session) newManager() (*lease.Manager, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sup.stopping.Load() {
		return nil, lease.ErrStopped
	}
	m, err := lease.NewManager(s.mgrOpts)
	if err != nil {
		return nil, err
	}
	s.mgr = m
	return m, nil
}

// run drives the session's lease until ctx ends. After a device-path
// release the node sits out device_path_cooldown without a manager, so it
// cannot compete for the row, then stands by again with a new one.
func (s *session) run(ctx context.Context) {
	defer s.stopped()
	for {
		if err := s.manager().Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("lease manager stopped", "err", err)
		}
		s.mu.Lock()
		cooling, p := s.cooling, s.pause
		s.cooling = false
		s.mu.Unlock()
		if p != nil && ctx.Err() == nil {
			if !s.sitOut(ctx, p) {
				return
			}
			continue
		}
		if !cooling || ctx.Err() != nil {
			return
		}
		s.setState("cooldown")
		s.log.Info("device path released: not competing for the session during the cooldown",
			"device_path_cooldown", admission.FormatSeconds(s.report.DevicePathCooldown))
		if !sleep(ctx, s.report.DevicePathCooldown) {
			return
		}
		if _, err := s.newManager(); err != nil {
			return
		}
		s.setState("standby")
		s.log.Info("cooldown over: standing by")
	}
}

// releaseDevicePath gives this one session up after its device stayed
// unreachable for device_path_step_down: bounded source close and bounded
// lease release, each min(5s, step_down_grace), as in the broker-path
// step-down; session.run then sits out the cooldown. The other sessions
// of the process are not touched.
func (s *session) releaseDevicePath(since time.Time) {
	stage := min(admission.MaxStepDownStage, s.report.Timing.StepDownGrace)
	s.mu.Lock()
	s.cooling = true
	mgr := s.mgr
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), stage)
	if err := s.endTerm(ctx); err != nil {
		s.log.Error("source close exceeded its bound", "bound", stage.String(), "err", err)
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), stage)
	defer cancel()
	if err := mgr.ReleaseWith(ctx, &lease.Release{Cause: CauseDevicePath, AtUnixNS: since.UnixNano()}); err != nil {
		// The standby then waits out lease_ttl: the owner-death path.
		s.log.Error("device-path release failed; standbys take over after lease_ttl", "bound", stage.String(), "err", err)
	}
}

func (s *session) setState(st string) {
	s.state.Store(st)
	s.sup.o.Metrics.setState(s.name, st)
}

// State is the session's current state name.
func (s *session) State() string {
	if v, ok := s.state.Load().(string); ok {
		return v
	}
	return "standby"
}

// stopped waits for the current term's close once the manager has
// stopped (it delivers no event after Run returns).
func (s *session) stopped() {
	s.mu.Lock()
	done := s.termDone
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	s.unclaiming.Wait()
	s.setState("stopped")
}

// handle runs on the manager's goroutine (lease.Options.OnEvent), so it
// never blocks: a blocked handler would delay renewals. A new term starts
// in its own goroutine, which first waits for the previous term's close:
// the device must not see the old connection and the new one at once.
func (s *session) handle(ev lease.Event) {
	switch ev.Kind {
	case lease.EventBecameOwner:
		stop, done := make(chan struct{}), make(chan struct{})
		s.mu.Lock()
		prev := s.termDone
		s.stopTerm, s.termDone = stop, done
		s.mu.Unlock()
		go func() {
			defer close(done)
			if prev != nil {
				<-prev
			}
			s.owned.Store(true)
			s.serve(ev, stop)
		}()
	case lease.EventLost, lease.EventFenced:
		s.log.Warn("ownership ended", "event", ev.Kind.String(), "epoch", ev.Epoch)
	case lease.EventReleased:
		s.log.Info("lease released", "epoch", ev.Epoch, "err", ev.Err)
	case lease.EventTimingMismatch, lease.EventTimingMatch:
		s.onTiming(ev)
	}
}

// endTerm ends the current term gracefully (orderly closes, retained
// "released" status) and waits for it, at most until ctx ends.
func (s *session) endTerm(ctx context.Context) error {
	s.mu.Lock()
	stop, done := s.stopTerm, s.termDone
	s.stopTerm = nil
	s.mu.Unlock()
	if stop == nil {
		return nil
	}
	close(stop)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve runs one ownership: activate (retrying while owner), serve until
// the owner context ends (fence, loss) or stop is closed (release), then
// close. At the top of every renew round it checks the broker path and the
// device path against their thresholds, both counted from the ownership's
// start, so a path that never works during activation hands the session
// over exactly like one lost later.
func (s *session) serve(ev lease.Event, stop <-chan struct{}) {
	o := s.sup.o
	log := s.log.With("epoch", ev.Epoch)
	o.Metrics.Takeovers.WithLabelValues(s.name).Inc()
	o.Metrics.Epoch.WithLabelValues(s.name).Set(float64(ev.Epoch))
	s.full.Store(false)
	h := newPathHealth(s, time.Now(), s.deviceNames())
	s.setHealth(h)
	defer func() {
		h.forget()
		s.setHealth(nil)
		s.owned.Store(false)
		s.full.Store(false)
		s.setState("standby")
	}()
	ctx := guarded(ev.Owner)
	log.Info("became owner", "observed_stale_row_ago", lease.Now()-ev.Observed)

	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	activated := make(chan *term, 1)
	go func() { activated <- s.activate(actx, ev.Epoch, h, log) }()

	check, stopCheck := s.pathCheck()
	defer stopCheck()
	var (
		t        *term
		w        *dataplane.Work
		fullCh   <-chan struct{}
		changed  <-chan struct{}
		graceful bool
	)
loop:
	for {
		select {
		case t = <-activated:
			activated = nil
			if t != nil {
				w = t.dp.Start(ctx, ev.Owner)
				// "active" was published by each client's reconcile
				// during Open: once per takeover, stamped when it
				// happened.
				t.markActivated()
				h.markActivated()
				fullCh, changed = t.fullCh, h.changed
			}
		case <-fullCh:
			fullCh = nil
			s.reachedFull(ctx, t, ev, log)
		case <-changed:
			s.publishDevices(ctx, t, h, log)
		case <-check:
			if s.checkPaths(t, h, log) {
				check = nil
				acancel()
			}
		case <-stop:
			graceful = true
			break loop
		case <-ctx.Done():
			log.Warn("owner context ended: closing", "cause", context.Cause(ctx))
			break loop
		}
	}
	s.setState("closing")
	acancel()
	closeOwnership(activated, t, w)
	s.dropPreclaim() // one the term did not use
	s.setConflict("")
	log.Info("term closed", "graceful", graceful)
}

// pathCheck is the renew-round tick of serve's path checks: nil (never
// ready) when neither broker_health_step_down nor device_path_step_down
// is on. The returned func stops it.
func (s *session) pathCheck() (<-chan time.Time, func()) {
	if s.threshold <= 0 && s.devThreshold <= 0 {
		return nil, func() {}
	}
	tick := time.NewTicker(s.report.Timing.RenewInterval)
	return tick.C, tick.Stop
}

// closeOwnership closes what an ownership opened, once its activation
// context is cancelled. Gracefully, the device and broker see an orderly
// close and the status topic says "released" before the row is given up;
// the endpoint claims are released meanwhile (session.unclaiming).
// Fenced or lost, the transports already dropped their connections when
// the owner context ended, and closing only tidies up. An activation
// still under way (activated not nil) closes what it opened before it
// returns.
func closeOwnership(activated <-chan *term, t *term, w *dataplane.Work) {
	if activated != nil {
		t = <-activated
	}
	if w != nil {
		w.Stop()
	}
	if t != nil {
		t.close()
		// After the transports closed, and in the background: a claim
		// only tells other fleets and sessions the endpoint is in use,
		// the next owner of this session takes it over, so the row's
		// release need not wait for it.
		t.s.unclaiming.Go(func() {
			t.unclaim()
			t.s.log.Debug("close: endpoint claims released")
		})
	}
	if w != nil {
		w.Wait()
	}
}

// guarded is the owner context with a guard: every device request checks
// the fence deadline right before it is sent, so an owner resumed after a
// freeze sends nothing once fenced, even before the owner context is
// cancelled.
func guarded(owner *lease.Owner) context.Context {
	valid := owner.Valid
	return transports.WithGuard(owner.Context(), func() error {
		if !valid() {
			return lease.ErrFenced
		}
		return nil
	})
}

// activate builds and opens a term's transports, retrying after a poll
// while the lease is ours; the broker-path and device-path checks of serve
// end the retries by cancelling ctx. It returns nil when ctx ends first.
func (s *session) activate(ctx context.Context, epoch uint64, h *pathHealth, log *slog.Logger) *term {
	for {
		s.setState("activating")
		h.beginAttempt(time.Now())
		var t *term
		// Another fleet's claim on a device endpoint keeps the term from
		// opening anything (failover/claims.go).
		began := time.Now()
		unclaim, err := s.claimEndpoints(ctx, s.sup.o.Identity.Owner)
		log.Debug("activation: endpoints claimed", "took", time.Since(began).String(), "err", err)
		if err == nil {
			t, err = s.build(epoch, s.sup.o.Identity.Owner)
		}
		if err == nil {
			t.h, t.unclaim = h, unclaim
			err = t.open(ctx)
		}
		if err == nil {
			return t
		}
		unclaim()
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, lease.ErrClaimed) {
			log.Error("activation failed; retrying while owner", "err", err,
				"broker_health_step_down", offOr(s.threshold), "device_path_step_down", offOr(s.devThreshold))
		}
		if !sleep(ctx, s.report.Timing.AcquirePollInterval) {
			return nil
		}
	}
}

// sleep waits for d; it reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// offOr prints a threshold as it is configured: off, or the duration.
func offOr(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return admission.FormatSeconds(d)
}

// publishStatus publishes the session's status on every broker.
func (t *term) publishStatus(ctx context.Context, state string, full bool, log *slog.Logger) {
	for _, c := range t.dp.Brokers {
		if err := c.PublishStatus(ctx, state, full); err != nil {
			log.Warn("status", "broker", c.Name(), "state", state, "err", err)
		}
	}
}

// lastFailover is what /sessions shows beside the last
// FailureToFullDuration: its cause and the admitted budget of that
// failure mode.
type lastFailover struct {
	cause  string
	budget time.Duration
}

// reachedFull records the term's ServiceLevelFull: FailureToFullDuration,
// the serving state and status.
func (s *session) reachedFull(ctx context.Context, t *term, ev lease.Event, log *slog.Logger) {
	d, cause := failureToFull(ev, time.Now())
	budget := s.report.OwnerDeath
	switch {
	case cause == CauseBrokerPath && s.report.BrokerPath != nil:
		budget = *s.report.BrokerPath
	case cause == CauseDevicePath && s.report.DevicePath != nil:
		budget = *s.report.DevicePath
	}
	s.mu.Lock()
	s.lastFull, s.last = d, lastFailover{cause: cause, budget: budget.Total}
	s.mu.Unlock()
	s.full.Store(true)
	s.setState("serving")
	s.sup.o.Metrics.observeFailureToFull(s.name, cause, d)
	log.Info("ServiceLevelFull", "failure_to_full", d.String(), "failure_to_full_ns", int64(d), "cause", cause,
		"budget", admission.FormatSeconds(budget.Total), "within_budget", d <= budget.Total)
	t.publishStatus(ctx, mqtt.StateServing, true, log)
	if !t.h.allUp() {
		s.publishDevices(ctx, t, t.h, log)
	}
}

// publishDevices puts a device outage (or its end) on the status topic:
// "degraded" while a device does not answer, "serving" again once every
// device does and the term had reached ServiceLevelFull.
func (s *session) publishDevices(ctx context.Context, t *term, h *pathHealth, log *slog.Logger) {
	if h.allUp() {
		if !t.isFull() {
			return
		}
		s.full.Store(true)
		log.Info("every device answers again: serving")
		t.publishStatus(ctx, mqtt.StateServing, true, log)
		return
	}
	s.full.Store(false)
	dev, since, err, _ := h.downDevice()
	log.Warn("a device does not answer: publishing bad quality", "device", dev, "since", since.Format(time.RFC3339Nano), "err", err)
	t.publishStatus(ctx, mqtt.StateDegraded, false, log)
}

// checkPaths runs at the top of every renew round. A broker path not
// converged for broker_health_step_down hands the whole process over; a
// device unreachable for device_path_step_down releases this session. It
// reports whether it started either.
func (s *session) checkPaths(t *term, h *pathHealth, log *slog.Logger) bool {
	o := s.sup.o
	now := time.Now()
	if s.threshold > 0 {
		st := h.activationBroker()
		if t != nil {
			st = t.brokerState()
		}
		if !st.Converged && !st.Since.IsZero() && now.Sub(st.Since) >= s.threshold {
			o.Metrics.StepDowns.WithLabelValues(s.name).Inc()
			log.Error("broker path lost: stepping down", "not_converged_for", now.Sub(st.Since).String(),
				"broker_health_step_down", admission.FormatSeconds(s.threshold), "activated", t != nil, "err", st.Err)
			s.sup.requestStepDown(s, st)
			return true
		}
	}
	if s.devThreshold > 0 {
		if dev, since, err, down := h.downDevice(); down && now.Sub(since) >= s.devThreshold {
			o.Metrics.DeviceStepDowns.WithLabelValues(s.name).Inc()
			log.Error("device path lost: releasing this session", "device", dev, "unreachable_for", now.Sub(since).String(),
				"device_path_step_down", admission.FormatSeconds(s.devThreshold),
				"device_path_cooldown", admission.FormatSeconds(s.report.DevicePathCooldown), "activated", t != nil, "err", err)
			go s.releaseDevicePath(since)
			return true
		}
	}
	return false
}
