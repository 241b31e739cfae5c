package failover

import (
	"context"
	"errors"

	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
)

// endpointIDs are the session's device endpoints as claimed in the lease
// store: a serial port or a loopback address names a resource of this
// machine only, so its claim carries the node name.
func (s *session) endpointIDs() []string {
	var ids []string
	seen := map[string]bool{}
	for _, r := range s.routes {
		d := s.sup.o.Config.Devices[r.Device]
		if d == nil || (r.Kind != routes.RoutePoll && r.Kind != routes.RouteWrite) {
			continue
		}
		ep, err := d.Endpoint()
		if err != nil {
			continue // validation refused it; build reports it
		}
		id := ep.ID
		if ep.NodeLocal {
			id += " on " + s.sup.o.Node
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// claimEndpoints claims the session's device endpoints before any is
// opened, within one renew_call_timeout, and returns what releases them.
// A live claim of another key_prefix or session is an error: the term
// must not activate. A store that does not answer is not: claims only
// detect a second fleet, the lease row keeps the device exclusive.
func (s *session) claimEndpoints(ctx context.Context, ownerID string) (release func(), err error) {
	o := s.sup.o
	release = func() {}
	ids := s.endpointIDs()
	if o.Claims == nil || len(ids) == 0 {
		return release, nil
	}
	t := s.report.Timing
	// One renew_call_timeout in all (admission's lease:endpoint_claim): a
	// handover's preclaim is waited for within it, and a claim after a
	// failed preclaim gets what is left of it.
	cctx, cancel := context.WithTimeout(ctx, t.RenewCallTimeout)
	defer cancel()
	if rel := s.usePreclaim(cctx); rel != nil {
		s.setConflict("")
		return rel, nil
	}
	if err := ctx.Err(); err != nil {
		return release, err
	}
	mine := s.claim(ownerID)
	free, err := o.Claims.Claim(cctx, ids, mine, t.LeaseTTL)
	var conflict *lease.ClaimConflict
	switch {
	case errors.As(err, &conflict):
		if prev, _ := s.conflict.Load().(string); prev != conflict.Error() {
			s.log.Error("device endpoint held by another fleet or session: not activating", "endpoint", conflict.Endpoint,
				"key_prefix", mine.KeyPrefix, "other_key_prefix", conflict.Holder.KeyPrefix, "other_session", conflict.Holder.Session,
				"other_node", conflict.Holder.Node, "other_owner", conflict.Holder.Owner)
		}
		s.setConflict(conflict.Error())
		return release, err
	case err != nil:
		s.log.Warn("endpoint claim failed; activating unclaimed", "endpoints", ids, "err", err)
	default:
		release = s.releaser(free)
	}
	s.setConflict("")
	return release, nil
}

// claim is the claim row of this session's owner ownerID.
func (s *session) claim(ownerID string) lease.Claim {
	o := s.sup.o
	return lease.Claim{KeyPrefix: o.Config.LeaseStore.KeyPrefix, Session: s.name, Node: o.Node, Owner: ownerID}
}

// setConflict records the endpoint conflict keeping the session from
// activating; empty clears it.
func (s *session) setConflict(msg string) {
	s.conflict.Store(msg)
	v := 0.0
	if msg != "" {
		v = 1
	}
	s.sup.o.Metrics.ClaimConflicts.WithLabelValues(s.name).Set(v)
}

// preclaim is a planned handover's endpoint claim, made by its target as
// soon as the watch delivers the released row, beside its takeover's
// compare-and-swap rather than after it: the old owner has closed the
// device by then. Its activation uses it (and waits for it) instead of
// claiming; a takeover that fails releases it.
type preclaim struct {
	done    chan struct{}
	release func() // set before done is closed; nil when the claim failed
}

// claimAhead starts the preclaim of a handover from prev, unless one is
// under way. It takes over only prev's claims (lease.Claim.TakesOver), so
// it never overwrites the claim of an owner that took the row first.
func (s *session) claimAhead(prev string) {
	o := s.sup.o
	ids := s.endpointIDs()
	if o.Claims == nil || len(ids) == 0 {
		return
	}
	s.mu.Lock()
	if s.pre != nil {
		s.mu.Unlock()
		return
	}
	p := &preclaim{done: make(chan struct{})}
	s.pre = p
	s.mu.Unlock()
	go func() {
		defer close(p.done)
		t := s.report.Timing
		ctx, cancel := context.WithTimeout(context.Background(), t.RenewCallTimeout)
		defer cancel()
		mine := s.claim(o.Identity.Owner)
		mine.TakesOver = prev
		free, err := o.Claims.Claim(ctx, ids, mine, t.LeaseTTL)
		s.log.Debug("handover: endpoints claimed ahead of the takeover", "err", err)
		if err == nil {
			p.release = s.releaser(free)
		}
	}()
}

// takePreclaim hands the preclaim (nil if none) to its one user: the
// activation, or the handover that ended without the row.
func (s *session) takePreclaim() *preclaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pre
	s.pre = nil
	return p
}

// usePreclaim waits, until ctx ends, for the session's preclaim (if any)
// and returns its release when it holds the endpoints; nil otherwise. A
// preclaim not waited out is released in the background.
func (s *session) usePreclaim(ctx context.Context) func() {
	p := s.takePreclaim()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return p.release
	case <-ctx.Done():
		go releasePreclaim(p)
		return nil
	}
}

// dropPreclaim releases a preclaim nobody used (a takeover that failed,
// or a term that claimed for itself), in the background. The release
// deletes only rows nobody wrote since; one missed at shutdown lapses
// with the process's claim lease.
func (s *session) dropPreclaim() {
	if p := s.takePreclaim(); p != nil {
		go releasePreclaim(p)
	}
}

func releasePreclaim(p *preclaim) {
	<-p.done
	if p.release != nil {
		p.release()
	}
}

// releaser is the release of claims free, within one renew_call_timeout.
func (s *session) releaser(free func(context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.report.Timing.RenewCallTimeout)
		defer cancel()
		if err := free(ctx); err != nil {
			s.log.Warn("endpoint claim release", "err", err)
		}
	}
}
