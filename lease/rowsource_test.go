package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// A fed standby takes its baseline at the feed's arrival, not at the
// bulk read's send, and its takeover shares the read's call timeout.
func TestCoreFeedIsTheAcquireRead(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	c.SetFed(true)
	if s := c.Tick(0); s.Op.Kind != OpNone || s.WakeAt != Never {
		t.Fatalf("a fed standby issued %+v", s)
	}
	if !c.WantsFeed() {
		t.Fatal("an idle fed standby wants no feed")
	}
	other := Row{Owner: "n2#b", Node: "n2", Epoch: 3, Timing: cfg.RowTiming()}
	// The read was sent at 0 and answered by 50ms: the baseline is 50ms.
	if s := c.Feed(50*time.Millisecond, 0, Result{Row: other, Version: 7}); s.Op.Kind != OpNone {
		t.Fatalf("took a fresh revision at once: %+v", s)
	}
	// Just short of lease_ttl after the arrival: no takeover, although
	// lease_ttl has passed since the send.
	if s := c.Feed(cfg.LeaseTTL+49*time.Millisecond, cfg.LeaseTTL, Result{Row: other, Version: 7}); s.Op.Kind != OpNone {
		t.Fatalf("took over %v after the baseline: %+v", cfg.LeaseTTL-time.Millisecond, s)
	}
	// A read whose response came after its call timeout: no takeover.
	sent := cfg.LeaseTTL + 100*time.Millisecond
	if s := c.Feed(sent+cfg.RenewCallTimeout, sent, Result{Row: other, Version: 7}); s.Op.Kind != OpNone {
		t.Fatalf("took over after the call timeout: %+v", s)
	}
	sent += cfg.AcquirePollInterval
	cas := wantOp(t, c.Feed(sent+10*time.Millisecond, sent, Result{Row: other, Version: 7}), OpCAS)
	if cas.Expect != 7 || cas.Row.Epoch != 4 || cas.Deadline != sent+cfg.RenewCallTimeout {
		t.Fatalf("takeover %+v: want expect 7, epoch 4, deadline %v", cas, sent+cfg.RenewCallTimeout)
	}
	if c.WantsFeed() {
		t.Fatal("wants a feed with its compare-and-swap outstanding")
	}
	ev := wantEvent(t, c.Done(sent+20*time.Millisecond, Result{Version: 9}), EventBecameOwner)
	if ev.Observed != 50*time.Millisecond {
		t.Fatalf("observed %v, want the baseline 50ms", ev.Observed)
	}
}

// After a fence, a fed core ignores feeds until the post-fence hold.
func TestCoreFeedWaitsOutTheHold(t *testing.T) {
	c, cfg := own(t)
	c.SetFed(true)
	_, dl, _ := c.Owner()
	wantEvent(t, c.Tick(dl), EventFenced)
	mine := Row{Owner: me.Owner, Node: me.Node, Epoch: 1, Timing: cfg.RowTiming()}
	hold := dl + cfg.LeaseTTL - cfg.FenceAfter
	if s := c.Feed(hold-time.Millisecond, hold-2*time.Millisecond, Result{Row: mine, Version: 5}); s.Op.Kind != OpNone {
		t.Fatalf("reclaimed before the hold: %+v", s)
	}
	cas := wantOp(t, c.Feed(hold, hold-time.Millisecond, Result{Row: mine, Version: 5}), OpCAS)
	if cas.Expect != 5 {
		t.Fatalf("reclaim %+v", cas)
	}
}

// benchTiming is fastTiming with a slower poll, so polls can be counted.
var benchTiming = admission.Timing{
	LeaseTTL: 800 * time.Millisecond, RenewInterval: 120 * time.Millisecond, RenewJitter: 40 * time.Millisecond,
	RenewCallTimeout: 80 * time.Millisecond, AcquirePollInterval: 100 * time.Millisecond,
	StepDownGrace: time.Second, MaxRenewFails: 2,
}

type fleetNode struct {
	src    *RowSource
	cancel context.CancelFunc
	done   chan struct{}
	events chan Event
}

// startFleetNode runs one node's managers for keys, fed by one RowSource.
func startFleetNode(t *testing.T, st *MemStore, name string, cfg Config, keys []string) *fleetNode {
	t.Helper()
	src, err := NewRowSource(RowSourceOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &fleetNode{src: src, cancel: cancel, done: make(chan struct{}), events: make(chan Event, 10*len(keys))}
	left := len(keys)
	stopped := make(chan struct{}, len(keys))
	for _, k := range keys {
		m, err := NewManager(Options{Store: st, Key: k, Identity: Identity{Node: name, Owner: name + "#t"}, Config: cfg,
			Rows: src, OnEvent: func(e Event) { n.events <- e }})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = m.Run(ctx); stopped <- struct{}{} }()
	}
	go func() {
		for range left {
			<-stopped
		}
		close(n.done)
	}()
	t.Cleanup(func() { cancel(); <-n.done })
	return n
}

func owners(st *MemStore, keys []string, node string) int {
	n := 0
	for _, k := range keys {
		if r, _ := st.Get(k); r.Node == node {
			n++
		}
	}
	return n
}

// Three nodes of 30 sessions each: the standbys cost one bulk read per
// node per poll and no single-row read, and take every session over
// within the owner-death budget when the owner stops.
func TestRowSourceFleet(t *testing.T) {
	cfg := testConfig(t, benchTiming, 20*time.Millisecond)
	st := NewMemStore()
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("s%02d", i)
	}
	a := startFleetNode(t, st, "a", cfg, keys)
	waitFor(t, 10*time.Second, func() bool { return owners(st, keys, "a") == len(keys) })
	b := startFleetNode(t, st, "b", cfg, keys)
	c := startFleetNode(t, st, "c", cfg, keys)

	// Each newly subscribed manager cuts the poll short: count from one
	// poll after the nodes started.
	reads0, ownerReads := st.Reads(), a.src.Reads()
	waitFor(t, 10*time.Second, func() bool { return b.src.Reads() >= 1 && c.src.Reads() >= 1 })
	time.Sleep(cfg.AcquirePollInterval) // the startup reads are over
	b0, c0, start := b.src.Reads(), c.src.Reads(), time.Now()
	waitFor(t, 10*time.Second, func() bool { return b.src.Reads()-b0 >= 10 && c.src.Reads()-c0 >= 10 })
	polls := float64(time.Since(start)) / float64(admission.MinJitteredPoll(cfg.AcquirePollInterval))
	if got := st.Reads() - reads0; got != 0 {
		t.Fatalf("standbys made %d single-row reads", got)
	}
	for name, r := range map[string]int64{"b": b.src.Reads() - b0, "c": c.src.Reads() - c0} {
		// At most one read per poll per node, whatever its sessions.
		if float64(r) > polls+1 {
			t.Fatalf("node %s: %d bulk reads in %.1f polls", name, r, polls)
		}
	}
	if got := a.src.Reads() - ownerReads; got != 0 {
		t.Fatalf("the owner of every session made %d bulk reads", got)
	}

	budget, err := admission.OwnerDeath(benchTiming, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Stop a: its rows' last writes land before the cancel returns.
	a.cancel()
	<-a.done
	stopped := time.Now()
	waitFor(t, 10*budget.Total, func() bool { return owners(st, keys, "b")+owners(st, keys, "c") == len(keys) })
	if took := time.Since(stopped); took > budget.Total {
		t.Fatalf("takeover of every session took %v, budget %v", took, budget.Total)
	}
}

// ReadSoon cuts the poll short: the next bulk read comes well before the
// earliest instant a jittered poll would allow.
func TestRowSourceReadSoon(t *testing.T) {
	tm := admission.Timing{LeaseTTL: 8 * time.Second, RenewInterval: time.Second, RenewJitter: 200 * time.Millisecond,
		RenewCallTimeout: 500 * time.Millisecond, AcquirePollInterval: 2 * time.Second, StepDownGrace: time.Second, MaxRenewFails: 2}
	cfg := testConfig(t, tm, 20*time.Millisecond)
	st := NewMemStore()
	keys := []string{"s0", "s1"}
	startFleetNode(t, st, "a", cfg, keys)
	waitFor(t, 10*time.Second, func() bool { return owners(st, keys, "a") == len(keys) })
	b := startFleetNode(t, st, "b", cfg, keys)
	// Wait for a read after b's startup reads, then ask for another.
	waitFor(t, 10*time.Second, func() bool { return b.src.Reads() >= 1 })
	r0 := b.src.Reads()
	waitFor(t, 10*time.Second, func() bool { return b.src.Reads() > r0 })
	r1, seen := b.src.Reads(), time.Now()
	b.src.ReadSoon()
	earliest := admission.MinJitteredPoll(cfg.AcquirePollInterval)
	waitFor(t, 10*time.Second, func() bool { return b.src.Reads() > r1 })
	if took := time.Since(seen); took >= earliest {
		t.Fatalf("the read after ReadSoon came %v after the previous one, no sooner than a poll (%v)", took, earliest)
	}
}

// A fed standby offered the released row (a planned handover's watch)
// takes it in one compare-and-swap: no bulk read, no poll.
func TestOfferTakesAReleasedRowWithoutARead(t *testing.T) {
	tm := admission.Timing{LeaseTTL: 8 * time.Second, RenewInterval: time.Second, RenewJitter: 200 * time.Millisecond,
		RenewCallTimeout: 500 * time.Millisecond, AcquirePollInterval: 2 * time.Second, StepDownGrace: time.Second, MaxRenewFails: 2}
	cfg := testConfig(t, tm, 20*time.Millisecond)
	st := NewMemStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(name string, src *RowSource, events chan Event) *Manager {
		m, err := NewManager(Options{Store: st, Key: "s0", Identity: Identity{Node: name, Owner: name + "#t"}, Config: cfg,
			Rows: src, OnEvent: func(e Event) { events <- e }})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = m.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return m
	}
	aEvents, bEvents := make(chan Event, 10), make(chan Event, 10)
	a := run("a", nil, aEvents)
	waitFor(t, 10*time.Second, func() bool { return owners(st, []string{"s0"}, "a") == 1 })
	src, err := NewRowSource(RowSourceOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	b := run("b", src, bEvents)
	// b's startup read, then it waits out its 2s poll.
	waitFor(t, 10*time.Second, func() bool { return src.Reads() >= 1 })
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	row, ver := st.Get("s0")
	if row.Owner != "" {
		t.Fatalf("released row %+v names an owner", row)
	}
	reads, offered := src.Reads(), time.Now()
	b.Offer(VersionedRow{Row: row, Version: ver})
	for ev := range bEvents {
		if ev.Kind == EventBecameOwner {
			break
		}
	}
	if took, poll := time.Since(offered), admission.MinJitteredPoll(cfg.AcquirePollInterval); took >= poll {
		t.Fatalf("b owned the row %v after the offer, not before its poll %v", took, poll)
	}
	if got := src.Reads() - reads; got != 0 {
		t.Errorf("b made %d bulk reads to take an offered row", got)
	}
	if r, _ := st.Get("s0"); r.Node != "b" || r.Epoch != row.Epoch+1 {
		t.Errorf("row after the offer: %+v", r)
	}
}
