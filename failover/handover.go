package failover

import (
	"context"
	"errors"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
)

// errYielding reports a session already yielding, cooling down after a
// device-path release, or shutting down.
var errYielding = errors.New("failover: session already yielding or stopping")

// pause keeps a yielded session from competing for its row. It is over
// when another owner than from holds the row, when the row has seen a
// term after epoch (the next owner may already have handed it on: a
// handover back to this node must not find it still sitting out), or at
// until, whichever is first; with drain, when this node is no longer
// draining. While the node drains no pause is over.
type pause struct {
	reason string
	from   string
	epoch  uint64
	until  time.Time
	drain  bool
}

// paused reports whether the session yielded and does not compete.
func (s *session) paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pause != nil
}

// sitOut waits until p is over, then stands by with a new manager; false
// when ctx ended or the process is stopping.
func (s *session) sitOut(ctx context.Context, p *pause) bool {
	s.setState("standby")
	over := s.waitPause(ctx, p)
	s.mu.Lock()
	s.pause = nil
	s.mu.Unlock()
	if !over {
		return false
	}
	if _, err := s.newManager(); err != nil {
		return false
	}
	s.log.Info("competing again after a yield", "reason", p.reason)
	return true
}

// yield ends the session's term gracefully (if it owns one), releases
// the row and stops competing until p is over. A standby's release is one
// authoritative read: it only stops its manager.
func (s *session) yield(p *pause) error {
	s.mu.Lock()
	if s.sup.stopping.Load() || s.pause != nil || s.cooling {
		s.mu.Unlock()
		return errYielding
	}
	s.pause = p
	mgr := s.mgr
	s.mu.Unlock()
	at := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.report.CloseBound+time.Second)
	if err := s.endTerm(ctx); err != nil {
		s.log.Error("close exceeded its bound", "reason", p.reason, "err", err)
	}
	cancel()
	s.log.Debug("yield: term closed", "reason", p.reason, "took", time.Since(at).String())
	// One more call's time: the manager may be in a store call when the
	// release is asked for.
	ctx, cancel = context.WithTimeout(context.Background(), (admission.ReleaseCalls+1)*s.report.Timing.RenewCallTimeout)
	defer cancel()
	err := mgr.ReleaseWith(ctx, &lease.Release{Cause: CauseHandover, AtUnixNS: at.UnixNano()})
	s.log.Debug("yield: row released", "reason", p.reason, "took", time.Since(at).String(), "err", err)
	return err
}

// waitPause waits until p is over (true) or ctx ends (false).
func (s *session) waitPause(ctx context.Context, p *pause) bool {
	f := s.sup.fleet
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var row <-chan struct{}
	if p.from != "" {
		row = f.store.WatchRow(wctx, s.name)
	}
	var bound <-chan time.Time
	if !p.until.IsZero() {
		t := time.NewTimer(time.Until(p.until))
		defer t.Stop()
		bound = t.C
	}
	for !s.pauseOver(ctx, p) {
		select {
		case <-ctx.Done():
			return false
		case <-row:
		case <-bound:
			bound = nil
		case <-f.changed():
		case <-time.After(s.report.Timing.AcquirePollInterval):
		}
	}
	return true
}

func (s *session) pauseOver(ctx context.Context, p *pause) bool {
	f := s.sup.fleet
	switch {
	case f.isDraining():
		return false
	case p.drain:
		return true
	case !p.until.IsZero() && !time.Now().Before(p.until):
		return true
	}
	return s.movedOn(ctx, p.from, p.epoch)
}

// movedOn reads the session's row, within one renew call's timeout, and
// reports whether it names an owner other than from, or (epoch > 0) an
// epoch after epoch: a later term, owned or already released again.
func (s *session) movedOn(ctx context.Context, from string, epoch uint64) bool {
	rctx, cancel := context.WithTimeout(ctx, s.report.Timing.RenewCallTimeout)
	defer cancel()
	row, _, err := s.sup.o.Store.Read(rctx, s.name)
	return err == nil && ((row.Owner != "" && row.Owner != from) || (epoch > 0 && row.Epoch > epoch))
}

// handoverBudget is the session's admitted handover budget; it also
// bounds every hold of a handover.
func (s *session) handoverBudget() time.Duration {
	b, err := admission.HandoverOf(s.report)
	if err != nil {
		// Admission refused overflowing budgets; the owner-death one
		// covers a handover too.
		return s.report.OwnerDeath.Total
	}
	return b.Total
}

// giveAway hands the owned session over: close, release, and hold off
// until another owner holds the row or the handover budget has passed.
func (s *session) giveAway(req lease.HandoverRequest) {
	me := s.sup.o.Identity.Owner
	start := time.Now()
	budget := s.handoverBudget()
	if err := s.yield(&pause{reason: "handover", from: me, epoch: req.Epoch, until: start.Add(budget)}); err != nil {
		s.log.Error("handover: release failed", "to", req.To, "err", err)
		return
	}
	s.log.Info("handover: closed and released", "to", req.To, "epoch", req.Epoch,
		"took", time.Since(start).String(), "handover_budget", admission.FormatSeconds(budget))
}

// take is the target's side: it makes its manager poll at every change
// of the row until it owns it, another owner does, or the handover budget
// has passed. A store that delivers the watched rows (lease.RowWatcher)
// hands the released row to the manager, which takes it without reading
// it again; the named target claims the device endpoints meanwhile
// (claimAhead). After each poke it looks at its manager often for one call's
// time, so the request is cleared (and a puller's next one sent) as soon
// as the row is ours.
func (s *session) take(ctx context.Context, req lease.HandoverRequest) {
	ctx, cancel := context.WithTimeout(ctx, s.handoverBudget())
	defer cancel()
	f := s.sup.fleet
	s.manager().Defer("", false) // the target never defers (spread.go, takers)
	defer func() {
		if s.manager().Owner() == nil {
			s.dropPreclaim()
		}
	}()
	var changed <-chan struct{}
	var rows <-chan lease.VersionedRow
	if rw, ok := f.store.(lease.RowWatcher); ok {
		rows = rw.WatchRowValues(ctx, s.name)
	} else {
		changed = f.store.WatchRow(ctx, s.name)
	}
	for {
		s.log.Debug("handover: polling the row now")
		s.manager().Poke()
		fast := time.Now().Add(s.report.Timing.RenewCallTimeout)
	look:
		for {
			if o := s.manager().Owner(); o != nil && o.Epoch() > req.Epoch {
				s.log.Debug("handover: taken", "epoch", o.Epoch())
				f.clear(ctx, s, req)
				return
			}
			wait := s.report.Timing.AcquirePollInterval
			if time.Now().Before(fast) {
				wait = 5 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return
			case r, ok := <-rows:
				if !ok {
					return
				}
				if r.Row.Owner == "" {
					s.log.Debug("handover: the watch delivered the released row", "version", r.Version)
					if req.To == f.node && s.manager().Owner() == nil {
						s.claimAhead(req.Owner)
					}
					s.manager().Offer(r)
					break look
				}
			case _, ok := <-changed:
				if !ok {
					return
				}
				break look
			case <-time.After(wait):
				if wait == s.report.Timing.AcquirePollInterval {
					break look
				}
			}
		}
	}
}
