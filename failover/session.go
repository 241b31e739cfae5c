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
	ctl       sessionCtl // the lease manager; planned handovers replace it
	log       *slog.Logger

	state    atomic.Value // string, one of States
	conflict atomic.Value // string, see SessionStatus.EndpointConflict
	owned    atomic.Bool
	full     atomic.Bool

	mu       sync.Mutex
	stopTerm chan struct{} // closed to end the current term gracefully
	termDone chan struct{} // closed when the current term has closed
	lastFull time.Duration // last FailureToFullDuration, for tests and logs
	timing   timingState   // the row owner's timing against this node's
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

// serve runs one ownership term: activate, serve until the owner context
// ends (fence, loss) or stop is closed (release), then close.
func (s *session) serve(ev lease.Event, stop <-chan struct{}) {
	o := s.sup.o
	owner := ev.Owner
	log := s.log.With("epoch", ev.Epoch)
	o.Metrics.Takeovers.WithLabelValues(s.name).Inc()
	o.Metrics.Epoch.WithLabelValues(s.name).Set(float64(ev.Epoch))
	s.full.Store(false)
	defer func() {
		s.owned.Store(false)
		s.full.Store(false)
		s.setState("standby")
	}()
	valid := owner.Valid
	// Every device request checks the fence deadline right before it is
	// sent, so an owner resumed after a freeze sends nothing once fenced,
	// even before the owner context is cancelled.
	ctx := transports.WithGuard(owner.Context(), func() error {
		if !valid() {
			return lease.ErrFenced
		}
		return nil
	})
	log.Info("became owner", "observed_stale_row_ago", lease.Now()-ev.Observed)

	var t *term
	unclaim := func() {}
	defer func() { unclaim(); s.setConflict("") }()
	for {
		s.setState("activating")
		var err error
		if unclaim, err = s.claimEndpoints(ctx, o.Identity.Owner); err == nil {
			t, err = s.build(ev.Epoch, o.Identity.Owner)
		}
		if err == nil {
			err = t.open(ctx)
		}
		if err == nil {
			break
		}
		unclaim()
		unclaim = func() {}
		if !errors.Is(err, lease.ErrClaimed) {
			log.Error("activation failed; retrying while owner", "err", err)
		}
		// The lease stays ours; a standby could not do better against a
		// device or broker that refuses everyone. Retry after a poll.
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(s.report.Timing.AcquirePollInterval):
		}
	}

	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Pollers of pushed (subscribed) groups, by device and group: a pushed
	// value is published at once, not at the group's next interval.
	pushed := map[string]map[string][]*poller{}
	for _, r := range s.routes {
		if r.Kind != routes.RoutePoll {
			continue
		}
		dev, ok := t.devices[r.Device].(transports.Poller)
		if !ok {
			log.Error("device cannot be polled", "route", r.Name, "device", r.Device)
			continue
		}
		route := r
		var once sync.Once
		onGood := func() { once.Do(func() { t.markPublished(route.Name) }) }
		for _, g := range s.sup.o.Config.Devices[r.Device].Groups {
			if len(r.Groups) > 0 && !slices.Contains(r.Groups, g.Name) {
				continue
			}
			p := &poller{t: t, route: r, group: g, dev: dev, local: t.brokers[r.Broker],
				last: map[string]transports.Value{}, band: map[string]float64{}, onGood: onGood, failing: map[string]bool{}, topics: map[string]string{}}
			for _, tag := range g.Tags {
				p.band[tag.Name] = tag.Deadband
			}
			p.start(wctx, valid, &wg)
			if _, ok := dev.(transports.Notifier); ok && g.Mode == "subscribe" {
				if pushed[r.Device] == nil {
					pushed[r.Device] = map[string][]*poller{}
				}
				pushed[r.Device][g.Name] = append(pushed[r.Device][g.Name], p)
			}
		}
	}
	for name, groups := range pushed {
		t.devices[name].(transports.Notifier).SetNotify(func(group string, _ transports.Value) {
			for _, p := range groups[group] {
				p.kick()
			}
		})
	}
	for _, w := range t.writers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx, valid) }()
	}
	for _, b := range t.bridges {
		wg.Add(1)
		go func() { defer wg.Done(); _ = b.Run(wctx) }()
	}
	for _, c := range t.brokers {
		if err := c.PublishStatus(ctx, mqtt.StateActive, false); err != nil {
			log.Warn("status", "broker", c.Name(), "err", err)
		}
	}
	t.markActivated()

	var check <-chan time.Time
	if s.threshold > 0 {
		tick := time.NewTicker(s.report.Timing.RenewInterval)
		defer tick.Stop()
		check = tick.C
	}
	fullCh := t.fullCh
	graceful := false
loop:
	for {
		select {
		case <-fullCh:
			fullCh = nil
			d := lease.Now() - ev.Observed
			s.mu.Lock()
			s.lastFull = d
			s.mu.Unlock()
			s.full.Store(true)
			s.setState("serving")
			o.Metrics.observeFailureToFull(s.name, "takeover", d)
			log.Info("ServiceLevelFull", "failure_to_full", d.String(), "failure_to_full_ns", int64(d),
				"owner_death_budget", admission.FormatSeconds(s.report.OwnerDeath.Total), "within_budget", d <= s.report.OwnerDeath.Total)
			for _, c := range t.brokers {
				if err := c.PublishStatus(ctx, mqtt.StateServing, true); err != nil {
					log.Warn("status", "broker", c.Name(), "err", err)
				}
			}
		case <-check:
			// The top of a renew round: a broker path not converged for
			// broker_health_step_down hands the whole process over.
			st := t.brokerState()
			if !st.Converged && !st.Since.IsZero() && time.Since(st.Since) >= s.threshold {
				o.Metrics.StepDowns.WithLabelValues(s.name).Inc()
				log.Error("broker path lost: stepping down", "not_converged_for", time.Since(st.Since).String(),
					"broker_health_step_down", admission.FormatSeconds(s.threshold), "err", st.Err)
				s.sup.requestStepDown(s, st)
				check = nil
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
	// Gracefully, the device and broker see an orderly close and the
	// status topic says "released" before the row is given up. Fenced or
	// lost, the transports already dropped their connections when the
	// owner context ended, and closing only tidies up.
	wcancel()
	t.close()
	wg.Wait()
	log.Info("term closed", "graceful", graceful)
}
