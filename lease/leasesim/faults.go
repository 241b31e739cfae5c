package leasesim

import (
	"container/heap"
	"context"
	"time"

	"github.com/leasebridge/leasebridge/lease"
)

var bg = context.Background()

// schedule lays out the run: two cycles of a chaos phase (overlapping
// store loss, partitions, freezes, kills, restarts and releases; safety
// only) followed by a calm phase (healthy store and nodes) in which one
// probe kills, freezes or partitions an owner or releases a lease, and
// liveness is asserted against the admitted budgets. It returns the end.
// Chaos lasts 3 to 7 times the mean of the fleet's shortest and longest
// lease_ttl; the calm phase waits out the longest.
func (s *sim) schedule() int64 {
	l, c := s.lmax, s.cmax
	lc := s.lmin
	s.latMax = s.cmin / 5
	t := int64(0)
	for range 2 {
		chaos := 3*lc + s.rnd.Int64N(4*lc)
		s.at(t, nil, s.startChaos)
		for range 3 + s.rnd.IntN(6) {
			s.chaosFault(t+s.rnd.Int64N(chaos), t+chaos)
		}
		t += chaos
		s.at(t, nil, s.startCalm)
		// Let in-flight writes land, resumed owners fence and standbys
		// see a fresh revision before probing.
		probe := t + 2*l + 2*c
		s.at(probe, nil, s.probe)
		t = probe + max(s.odMax, s.relMax) + l
	}
	return t
}

// chaosFault schedules one random fault starting at t and undone before
// end at the latest (the calm phase heals everything anyway).
func (s *sim) chaosFault(t, end int64) {
	l, c := s.lmax, s.cmax
	n := s.nodes[s.rnd.IntN(len(s.nodes))]
	undo := t + s.rnd.Int64N(max(1, min(end-t, 2*l)))
	switch s.rnd.IntN(7) {
	case 6:
		m := n.mgrs[s.rnd.IntN(len(n.mgrs))]
		s.at(t, nil, func() { m.partitioned = true; s.tracef("n%d %s partitioned", n.id, s.keys[m.session]) })
		s.at(undo, nil, func() { m.partitioned = false })
	case 0:
		s.at(t, nil, func() { s.kill(n) })
		s.at(undo, nil, func() { s.restart(n) })
	case 1:
		s.at(t, nil, func() { s.freeze(n) })
		s.at(undo, nil, func() { s.resume(n) })
	case 2:
		s.at(t, nil, func() { s.partition(n, true) })
		s.at(undo, nil, func() { s.partition(n, false) })
	case 3:
		drop, lose, lat := s.rnd.Float64()*0.5, s.rnd.Float64()*0.5, s.rnd.Int64N(3*c/2)
		s.at(t, nil, func() {
			if !s.calm {
				s.drop, s.lose, s.latMax = drop, lose, lat
				s.tracef("store lossy drop=%.2f lose=%.2f lat<=%v", drop, lose, time.Duration(lat))
			}
		})
		s.at(undo, nil, func() { s.drop, s.lose, s.latMax = 0, 0, s.cmin/5 })
	case 4:
		m := n.mgrs[s.rnd.IntN(len(n.mgrs))]
		owner := s.rnd.IntN(2) == 0
		s.at(t, nil, func() {
			if owner {
				m = s.pickOwner()
			}
			// A standby's release must wait out a fenced term's close.
			if m != nil && m.n.alive && !m.stopped {
				s.release(m)
			}
		})
		s.at(undo, nil, func() { s.heal(false) })
	case 5:
		// Slow but lossless store: calls time out, writes still land.
		lat := c/2 + s.rnd.Int64N(c)
		s.at(t, nil, func() {
			if !s.calm {
				s.latMax = lat
			}
		})
		s.at(undo, nil, func() { s.latMax = s.cmin / 5 })
	}
}

func (s *sim) startChaos() {
	s.tracef("phase chaos")
	s.calm = false
	s.obl = nil
	for _, n := range s.nodes {
		n.leg = 0
	}
	s.heal(true)
}

func (s *sim) startCalm() {
	s.tracef("phase calm")
	s.calm = true
	// Each leg at most a fifth of the shortest call timeout: every node's
	// calls complete, as the budgets assume.
	s.drop, s.lose, s.latMax = 0, 0, s.cmin/5
	if s.o.SlowCalm {
		// A round trip of 0.55 to 0.95 of the node's own call timeout.
		for _, n := range s.nodes {
			n.leg = int64(n.sc.c) * (550 + s.rnd.Int64N(401)) / 2000
			s.tracef("n%d store leg %v", n.id, time.Duration(n.leg))
		}
	}
	s.heal(true)
}

// heal restarts released managers and, when all is set, also restarts
// killed nodes, resumes frozen ones and heals partitions.
func (s *sim) heal(all bool) {
	for _, n := range s.nodes {
		if all {
			s.partition(n, false)
			for _, m := range n.mgrs {
				m.partitioned = false
			}
			s.resume(n)
			s.restart(n)
		}
		if !n.alive {
			continue
		}
		for _, m := range n.mgrs {
			if m.stopped {
				s.startMgr(m)
			}
		}
	}
}

func (s *sim) kill(n *node) {
	if !n.alive {
		return
	}
	s.tracef("n%d kill", n.id)
	n.alive, n.frozen, n.deferred = false, false, nil
	n.gen++
	for _, m := range n.mgrs {
		if m.term != nil {
			// The process is gone; the OS closes its sockets.
			s.closeTerm(m, min(s.now, s.worstEnd(m.term)))
		}
		m.stopped = true
		s.checkSafety(m.session)
	}
}

func (s *sim) restart(n *node) {
	if n.alive {
		return
	}
	s.tracef("n%d restart", n.id)
	n.gen++
	s.startNode(n)
}

func (s *sim) freeze(n *node) {
	if n.alive && !n.frozen {
		s.tracef("n%d freeze", n.id)
		n.frozen = true
	}
}

func (s *sim) resume(n *node) {
	if !n.frozen {
		return
	}
	s.tracef("n%d resume", n.id)
	n.frozen = false
	for _, e := range n.deferred {
		s.seq++
		e.at, e.seq = s.now, s.seq
		heap.Push(&s.q, e)
	}
	n.deferred = nil
}

func (s *sim) partition(n *node, on bool) {
	if n.partitioned != on {
		s.tracef("n%d partitioned=%v", n.id, on)
		n.partitioned = on
	}
}

// release closes the owner's term (its transports are closed before the
// release is sent) and asks its core to release.
func (s *sim) release(m *mgr) {
	s.tracef("n%d %s release requested", m.n.id, s.keys[m.session])
	m.chaosRelease = !s.calm
	if m.term != nil {
		s.closeTerm(m, min(s.now, s.worstEnd(m.term)))
	}
	s.handle(m, m.core.Release(m.n.local(s.now)))
}

// pickOwner returns a random manager holding an open term on a running,
// unfrozen node, or nil.
func (s *sim) pickOwner() *mgr {
	var c []*mgr
	for _, n := range s.nodes {
		if !n.alive || n.frozen {
			continue
		}
		for _, m := range n.mgrs {
			if m.term != nil && !m.stopped {
				c = append(c, m)
			}
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rnd.IntN(len(c))]
}

// probe kills, freezes or partitions the node of a current owner, or
// releases one lease, and registers the liveness obligations.
func (s *sim) probe() {
	m := s.pickOwner()
	if m == nil {
		s.tracef("probe skipped: no owner")
		return
	}
	kind := s.rnd.IntN(4)
	if kind == 3 {
		s.stats.Probes++
		_, rel := s.limits(m.n)
		s.obl = append(s.obl, &obligation{kind: "release", session: m.session, victim: m.id.Owner, anchor: -1, limit: rel, since: s.now})
		s.release(m)
		return
	}
	n := m.n
	od, _ := s.limits(n)
	for _, v := range n.mgrs {
		if v.term != nil && !v.stopped {
			s.stats.Probes++
			s.obl = append(s.obl, &obligation{kind: "liveness", session: v.session, victim: v.id.Owner, anchor: s.now, limit: od, since: s.now})
		}
	}
	switch kind {
	case 0:
		s.kill(n)
	case 1:
		s.freeze(n)
	case 2:
		s.partition(n, true)
	}
}

// limits are the budgets for a takeover after victim's owner dies or
// releases: every other node stands by in a calm phase, so the first of
// them to take over is no later than the smallest of their budgets.
func (s *sim) limits(victim *node) (ownerDeath, release int64) {
	ownerDeath, release = maxTime, maxTime
	for _, b := range s.nodes {
		if b == victim {
			continue
		}
		od, rel, err := s.budgets(victim, b)
		if err != nil {
			panic(err) // computed for every pair in setup
		}
		ownerDeath, release = min(ownerDeath, od), min(release, rel)
	}
	return ownerDeath, release
}

// landed moves an obligation's anchor: a takeover cannot start before the
// victim's last write has landed, and a release is timed from its landing.
func (s *sim) landed(who string, op lease.Op) {
	for _, o := range s.obl {
		if o.victim != who || s.keys[o.session] != op.Key {
			continue
		}
		switch {
		case o.kind == "release" && op.Kind == lease.OpRelease:
			o.anchor = s.now
		case o.kind == "liveness":
			o.anchor = max(o.anchor, s.now)
		}
	}
}

// meet settles the obligations a new term fulfils.
func (s *sim) meet(t *term) {
	kept := s.obl[:0]
	for _, o := range s.obl {
		if o.session != t.session || o.victim == t.m.id.Owner {
			kept = append(kept, o)
			continue
		}
		anchor := o.anchor
		if anchor < 0 {
			anchor = o.since
		}
		took := t.start - anchor
		if took > o.limit {
			s.failf(o.kind, "%s: takeover by %s took %v after the anchor, budget %v", s.keys[o.session], t.m.id.Owner, time.Duration(took), time.Duration(o.limit))
		}
		worst, limit := &s.stats.MaxOwnerDeath, &s.stats.OwnerDeathLimit
		if o.kind == "release" {
			worst, limit = &s.stats.MaxRelease, &s.stats.ReleaseLimit
		}
		if *limit == 0 || float64(took)/float64(o.limit) > float64(*worst)/float64(*limit) {
			*worst, *limit = time.Duration(took), time.Duration(o.limit)
		}
	}
	s.obl = kept
}

func (s *sim) checkObligations() {
	for _, o := range s.obl {
		if o.anchor >= 0 && s.now > o.anchor+o.limit {
			s.failf(o.kind, "%s: no takeover within %v of %v (victim %s)", s.keys[o.session], time.Duration(o.limit), time.Duration(o.anchor), o.victim)
			return
		}
	}
}
