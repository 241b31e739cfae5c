package failover

import (
	"context"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/lease"
)

// fleet is a supervisor's part of the fleet: it writes the node's
// membership row, acts on handover and drain requests, and tracks which
// sessions of the file nobody owns (docs/lease-protocol.md, fleet rows).
type fleet struct {
	sv    *Supervisor
	store lease.Fleet
	node  string
	// interval is the node row's cadence (the shortest renew_interval of
	// the node's sessions), ttl its liveness window (the longest lease_ttl).
	interval, ttl time.Duration
	// all are every session of the file, eligible here or not.
	all []string
	// started is when run began; deferral is the longest takeover
	// deferral of the node's sessions (0 without spread).
	started  time.Time
	deferral time.Duration
	// heldDefer is the deferral last set for each session while its row
	// was held (run's goroutine only): it stays set after the holder
	// releases the row in a handover.
	heldDefer map[string]heldDeferral

	mu       sync.Mutex
	draining bool
	drainOn  bool                          // a drain goroutine runs
	acted    map[string]uint64             // session -> request epoch acted on
	seen     map[string]lease.VersionedRow // session -> row version last seen
	seenAt   map[string]time.Time          // when seen's version was first seen
	notify   chan struct{}                 // closed and replaced at every change
	control  lease.Control                 // the requests last read
}

func newFleet(sv *Supervisor, store lease.Fleet) *fleet {
	f := &fleet{sv: sv, store: store, node: sv.o.Node, acted: map[string]uint64{}, seen: map[string]lease.VersionedRow{},
		seenAt: map[string]time.Time{}, notify: make(chan struct{}), heldDefer: map[string]heldDeferral{}}
	for _, r := range sv.o.Reports {
		f.all = append(f.all, r.Session)
		t := r.Timing
		if f.interval == 0 || t.RenewInterval < f.interval {
			f.interval = t.RenewInterval
		}
		f.ttl = max(f.ttl, t.LeaseTTL)
		f.deferral = max(f.deferral, r.TakeoverDeferral)
	}
	sort.Strings(f.all)
	if sv.o.Config.Spread {
		// Until the first view of the other nodes, a starting node takes
		// no free row at once: one started with it may be its taker.
		for _, s := range sv.sessions {
			s.manager().Defer("", true)
		}
	}
	return f
}

// changed is closed at the next change of the node's drain state.
func (f *fleet) changed() <-chan struct{} {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notify
}

func (f *fleet) isDraining() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining
}

// run keeps the node row fresh and acts on control requests until ctx
// ends. A watch delivers requests at once; every interval the requests
// are read again, so a broken watch delays them by at most that.
func (f *fleet) run(ctx context.Context) {
	f.started = time.Now()
	ctl := f.store.WatchControl(ctx)
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	// With spread, one more heartbeat when the start window ends
	// (deferTakeovers): the taker of a free row takes it then.
	var window <-chan time.Time
	if f.deferral > 0 {
		t := time.NewTimer(f.startWindow())
		defer t.Stop()
		window = t.C
	}
	for {
		f.reconcile(ctx)
		f.heartbeat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ctl:
		case <-tick.C:
		case <-window:
			window = nil
		}
	}
}

// startWindow is how long a starting node defers every free row, so that
// the rows of nodes started with it are in its view: half the takeover
// deferral, pb + 1.5*C. Then a free row's taker takes it within a poll and
// a call, before the others' deferral (2*pb + 3*C after they first saw it
// free) ends.
func (f *fleet) startWindow() time.Duration { return f.deferral / 2 }

func (f *fleet) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.ttl)
}

// reconcile reads the standing requests and acts on the new ones.
func (f *fleet) reconcile(ctx context.Context) {
	cctx, cancel := f.call(ctx)
	c, err := f.store.Control(cctx)
	cancel()
	if err != nil {
		f.sv.o.Logger.Warn("fleet: read control requests", "err", err)
		return
	}
	f.setDraining(ctx, c.Draining[f.node])
	f.mu.Lock()
	f.control = c
	f.mu.Unlock()
	for _, s := range f.sv.sessions {
		if req, ok := c.Handovers[s.name]; ok {
			f.onHandover(ctx, s, req)
		}
	}
}

func (f *fleet) setDraining(ctx context.Context, on bool) {
	f.mu.Lock()
	changed := f.draining != on
	f.draining = on
	start := on && !f.drainOn
	f.drainOn = f.drainOn || start
	if changed {
		close(f.notify)
		f.notify = make(chan struct{})
	}
	f.mu.Unlock()
	if changed {
		f.sv.o.Logger.Info("fleet: drain", "draining", on)
	}
	if start {
		go f.drain(ctx)
	}
}

// onHandover acts once per request: the owner it names gives the session
// away, the target (or, with no target, every eligible standby) polls at
// every change of the row, other standbys hold off, and whoever owns the
// session at a later epoch clears the request.
func (f *fleet) onHandover(ctx context.Context, s *session, req lease.HandoverRequest) {
	me := f.sv.o.Identity.Owner
	o := s.manager().Owner()
	if o != nil && o.Epoch() > req.Epoch {
		go f.clear(ctx, s, req)
		return
	}
	f.mu.Lock()
	done := f.acted[s.name] == req.Epoch && req.Epoch != 0
	f.acted[s.name] = req.Epoch
	f.mu.Unlock()
	if done {
		return
	}
	s.log.Debug("handover: request seen", "epoch", req.Epoch, "owner", req.Owner, "to", req.To)
	switch {
	case req.Owner == me:
		if o != nil && o.Epoch() == req.Epoch {
			go s.giveAway(req)
		}
	case req.To == "" || req.To == f.node:
		go s.take(ctx, req)
	default:
		go func() {
			_ = s.yield(&pause{reason: "handover to " + req.To, from: req.Owner, epoch: req.Epoch, until: time.Now().Add(s.handoverBudget())})
		}()
	}
}

// clear deletes a handover request that has been carried out.
func (f *fleet) clear(ctx context.Context, s *session, req lease.HandoverRequest) {
	cctx, cancel := f.call(ctx)
	defer cancel()
	if err := f.store.ClearHandover(cctx, s.name, req.Epoch); err != nil {
		s.log.Warn("fleet: clear handover request", "err", err)
	}
}

// drain stops every standby session from competing and hands the owned
// ones over one at a time, each after the previous one has a new owner
// or its handover budget has passed.
func (f *fleet) drain(ctx context.Context) {
	defer func() {
		f.mu.Lock()
		f.drainOn = false
		f.mu.Unlock()
	}()
	me := f.sv.o.Identity.Owner
	for _, s := range f.sv.sessions {
		if !f.isDraining() || ctx.Err() != nil {
			return
		}
		owned := s.manager().Owner() != nil
		start := time.Now()
		if err := s.yield(&pause{reason: "drain", drain: true}); err != nil || !owned {
			continue
		}
		s.log.Info("drain: closed and released", "took", time.Since(start).String())
		f.waitOwnedElsewhere(ctx, s, me, start.Add(s.handoverBudget()))
	}
}

// waitOwnedElsewhere waits until the session's row names an owner other
// than me, or until the deadline.
func (f *fleet) waitOwnedElsewhere(ctx context.Context, s *session, me string, until time.Time) {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	row := f.store.WatchRow(ctx, s.name)
	for !s.movedOn(ctx, me, 0) {
		select {
		case <-ctx.Done():
			return
		case <-row:
		case <-time.After(s.report.Timing.AcquirePollInterval):
		}
	}
}

// farewell writes the node row once more after a clean stop, marked
// stopped, so readers call the node down at once.
func (f *fleet) farewell() {
	// Bounded like a release (2 x renew_call_timeout), not by the node
	// row's TTL: with the store gone, a stop would otherwise wait it out.
	var bound time.Duration
	for _, s := range f.sv.sessions {
		bound = max(bound, 2*s.report.Timing.RenewCallTimeout)
	}
	if bound == 0 || bound > f.ttl {
		bound = f.ttl
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	n := f.nodeRow()
	n.Stopped = true
	if err := f.store.PutNode(ctx, n); err != nil {
		f.sv.o.Logger.Warn("fleet: write node row", "err", err)
	}
}

func (f *fleet) nodeRow() lease.NodeRow {
	n := lease.NodeRow{Node: f.node, Owner: f.sv.o.Identity.Owner, Draining: f.isDraining(),
		Interval: f.interval, TTL: f.ttl, RenewedAt: time.Now().UnixNano()}
	for _, s := range f.sv.sessions {
		n.Sessions = append(n.Sessions, s.name)
		if s.owned.Load() {
			n.Owned = append(n.Owned, s.name)
		}
		if s.full.Load() {
			n.Serving = append(n.Serving, s.name)
		}
	}
	return n
}

// heartbeat writes the node row, updates leasebridge_session_unowned and,
// from the rows it read, tells the managers whom to defer (with spread)
// and asks for a session to pull.
func (f *fleet) heartbeat(ctx context.Context) {
	n := f.nodeRow()
	cctx, cancel := f.call(ctx)
	defer cancel()
	if err := f.store.PutNode(cctx, n); err != nil {
		f.sv.o.Logger.Warn("fleet: write node row", "err", err)
	}
	rows, err := f.store.Rows(cctx, f.all)
	if err != nil {
		f.sv.o.Logger.Warn("fleet: read session rows", "err", err)
		return
	}
	now := time.Now()
	owned := map[string]bool{}
	for _, name := range f.all {
		v := 0.0
		if f.unowned(name, rows[name], now) {
			v = 1
		} else {
			owned[name] = true
		}
		f.sv.o.Metrics.SessionUnowned.WithLabelValues(name).Set(v)
	}
	var eligible map[string][]string // with spread only
	if f.sv.o.Config.Spread {
		cctx, cancel := f.call(ctx)
		nodes, err := f.store.Nodes(cctx)
		cancel()
		if err != nil {
			f.sv.o.Logger.Warn("fleet: read node rows", "err", err)
			return
		}
		at := time.Now() // the node rows' age is judged after their read
		eligible = liveEligible(f.all, nodes, at.UnixNano())
		f.deferTakeovers(rows, eligible, at)
	}
	f.pull(ctx, rows, owned, eligible)
}

// deferTakeovers tells every lease manager, with spread, whether this
// node is the taker of its row (takers): a standby that is not defers its
// takeover of a dead holder's row (and of the row it releases in a
// handover) by the admitted takeover_deferral, so the taker wins it and no
// session moves twice. A free row is deferred only while the node starts
// (for the start window whatever its view, then unless it is the taker,
// for at most takeover_deferral): nodes starting together land spread at
// once. A session with a handover request this node may answer is never
// deferred. eligible is liveEligible of the node rows read at now.
func (f *fleet) deferTakeovers(rows map[string]lease.VersionedRow, eligible map[string][]string, now time.Time) {
	holders := map[string]string{}
	for name, r := range rows {
		if r.Row.Owner != "" {
			holders[name] = r.Row.Node
		}
	}
	take := takers(f.all, eligible, holders, f.sv.o.Config.Pinning)
	age := now.Sub(f.started)
	f.mu.Lock()
	requests := f.control.Handovers
	f.mu.Unlock()
	for _, s := range f.sv.sessions {
		r := rows[s.name].Row
		req, asked := requests[s.name]
		d := heldDeferral{owner: r.Owner, on: take[s.name] != f.node}
		switch {
		case asked && (req.To == "" || req.To == f.node), r.Owner == f.sv.o.Identity.Owner:
			d.on = false
		case r.Owner == "" && age < f.deferral:
			d.on = age < f.startWindow() || d.on
		case r.Owner == "":
			// Released: the deferral set while it was held still applies
			// to a handover release (lease.Core.Defer).
			d = f.heldDefer[s.name]
		case r.Node == f.node:
			d.on = false // this node's predecessor's row: nobody else is its taker
		}
		if r.Owner != "" {
			f.heldDefer[s.name] = d
		}
		s.manager().Defer(d.owner, d.on)
	}
}

// heldDeferral is one lease.Manager.Defer setting.
type heldDeferral struct {
	owner string
	on    bool
}

// pull asks, through the store, for one session this node should run
// and another live node owns to be handed over here: its preferred_node
// sessions and, with spread, the ones rendezvous hashing gives it
// (desiredOwners). One request at a time: the next after the previous
// was carried out or lapsed, so a returning node gets work back
// gradually. eligible is liveEligible of the node rows (spread only).
func (f *fleet) pull(ctx context.Context, rows map[string]lease.VersionedRow, owned map[string]bool, eligible map[string][]string) {
	f.mu.Lock()
	c, draining := f.control, f.draining
	f.mu.Unlock()
	if draining {
		return
	}
	for _, h := range c.Handovers {
		if h.To == f.node {
			return
		}
	}
	cfg := f.sv.o.Config
	want := func(s string) bool { return cfg.Pinning(s).Preferred == f.node }
	if cfg.Spread {
		current := map[string]string{}
		for name, r := range rows {
			if owned[name] {
				current[name] = r.Row.Node
			}
		}
		desired := desiredOwners(f.all, eligible, current, cfg.Pinning)
		want = func(s string) bool { return desired[s] == f.node }
	}
	for _, s := range f.sv.sessions {
		r := rows[s.name].Row
		if !want(s.name) || !owned[s.name] || r.Node == f.node || s.paused() {
			continue
		}
		if _, pending := c.Handovers[s.name]; pending {
			continue
		}
		req := lease.HandoverRequest{Session: s.name, Epoch: r.Epoch, Owner: r.Owner, To: f.node, RequestedAt: time.Now().UnixNano()}
		cctx, cancel := f.call(ctx)
		err := f.store.RequestHandover(cctx, req, 2*s.handoverBudget())
		cancel()
		if err != nil {
			s.log.Warn("fleet: request a handover to this node", "err", err)
			return
		}
		s.log.Info("fleet: asking for the session", "owner", r.Node, "epoch", r.Epoch, "spread", cfg.Spread)
		f.mu.Lock()
		f.control.Handovers = maps.Clone(f.control.Handovers)
		if f.control.Handovers == nil {
			f.control.Handovers = map[string]lease.HandoverRequest{}
		}
		f.control.Handovers[s.name] = req
		f.mu.Unlock()
		return
	}
}

// unowned judges a row as a standby does: nobody owns it when it names
// no owner, or when its version has not changed for the owner's lease_ttl
// (and this node's longest one), observed here.
func (f *fleet) unowned(name string, r lease.VersionedRow, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, ok := f.seen[name]; !ok || prev.Version != r.Version {
		f.seen[name], f.seenAt[name] = r, now
	}
	if r.Row.Owner == "" {
		return true
	}
	return now.Sub(f.seenAt[name]) >= max(f.ttl, r.Row.Timing.LeaseTTL)
}
