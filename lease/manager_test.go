package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// A fast cadence for run-loop tests on the in-memory store.
var fastTiming = admission.Timing{
	LeaseTTL:            400 * time.Millisecond,
	RenewInterval:       60 * time.Millisecond,
	RenewJitter:         20 * time.Millisecond,
	RenewCallTimeout:    40 * time.Millisecond,
	AcquirePollInterval: 40 * time.Millisecond,
	StepDownGrace:       time.Second,
	MaxRenewFails:       2,
}

func runManager(t *testing.T, st Store, node string, cfg Config) (*Manager, chan Event, context.CancelFunc) {
	t.Helper()
	return startManager(t, Options{Store: st, Key: "s", Identity: Identity{Node: node, Owner: node + "#t"}, Config: cfg})
}

// startManager runs a manager with o until the test ends, its events on
// the returned channel.
func startManager(t *testing.T, o Options) (*Manager, chan Event, context.CancelFunc) {
	t.Helper()
	ev := make(chan Event, 100)
	o.OnEvent = func(e Event) { ev <- e }
	m, err := NewManager(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, ev, cancel
}

func next(t *testing.T, ch chan Event, kind EventKind) Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event", kind)
		}
	}
}

func TestManagerFencesWhenStoreUnreachable(t *testing.T) {
	cfg := testConfig(t, fastTiming, 20*time.Millisecond)
	st := NewMemStore()
	m, ev, _ := runManager(t, st, "a", cfg)
	became := next(t, ev, EventBecameOwner)
	o := became.Owner
	if o == nil || !o.Valid() || m.Owner() != o {
		t.Fatal("no valid owner handle")
	}
	st.SetFaults(Faults{Partitioned: true})
	<-o.Context().Done()
	at := Now()
	if !errors.Is(context.Cause(o.Context()), ErrFenced) {
		t.Fatalf("cause %v, want ErrFenced", context.Cause(o.Context()))
	}
	if at < o.Deadline() || o.Valid() {
		t.Fatalf("context ended %v before the deadline, or handle still valid", o.Deadline()-at)
	}
	next(t, ev, EventFenced)
	st.SetFaults(Faults{})
	// The row is still ours: reclaimed without waiting lease_ttl, but only
	// after the old term's close bound and margin.
	again := next(t, ev, EventBecameOwner)
	if again.Epoch != became.Epoch+1 || again.At < o.Deadline()+cfg.LeaseTTL-cfg.FenceAfter {
		t.Fatalf("reclaim %+v, old deadline %v", again, o.Deadline())
	}
}

func TestManagerReleaseHandsOver(t *testing.T) {
	cfg := testConfig(t, fastTiming, 20*time.Millisecond)
	st := NewMemStore()
	a, aev, _ := runManager(t, st, "a", cfg)
	first := next(t, aev, EventBecameOwner)
	_, bev, _ := runManager(t, st, "b", cfg)
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(first.Owner.Context()), ErrReleased) {
		t.Fatal("owner context not cancelled by release")
	}
	got := next(t, bev, EventBecameOwner)
	if got.Epoch != first.Epoch+1 {
		t.Fatalf("epoch %d after %d", got.Epoch, first.Epoch)
	}
	if err := a.Release(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("second release: %v, want ErrStopped", err)
	}
}

func TestManagerAdoptsLostResponses(t *testing.T) {
	// Slower than fastTiming: the owner must adopt its writes (two renew
	// rounds, ~1s) well before its fence (~2.7s) even when a loaded
	// machine delays its goroutine.
	tm := admission.Timing{LeaseTTL: 3 * time.Second, RenewInterval: 300 * time.Millisecond,
		RenewJitter: 100 * time.Millisecond, RenewCallTimeout: 200 * time.Millisecond,
		AcquirePollInterval: 200 * time.Millisecond, StepDownGrace: time.Second, MaxRenewFails: 2}
	cfg := testConfig(t, tm, 20*time.Millisecond)
	st := NewMemStore()
	_, ev, _ := runManager(t, st, "a", cfg)
	became := next(t, ev, EventBecameOwner)
	// Every write lands, every response is lost: the owner keeps the row
	// only by adopting its own writes, so it must not lose it. Wait until
	// more than a lease_ttl of renews landed unacknowledged, counted in
	// writes rather than wall time: without adoption the fence would have
	// ended the term by then.
	st.SetFaults(Faults{LoseResponse: 1})
	start := st.Writes("s")
	rounds := int(tm.LeaseTTL/(tm.RenewInterval+tm.RenewJitter/2)) + 2
	waitFor(t, 10*tm.LeaseTTL, func() bool { return st.Writes("s")-start >= rounds })
	st.SetFaults(Faults{})
	row, _ := st.Get("s")
	if row.Owner != "a#t" || row.Epoch != became.Epoch {
		t.Fatalf("row %+v", row)
	}
	select {
	case e := <-ev:
		t.Fatalf("%v while every write landed: %+v", e.Kind, e)
	default:
	}
}

// Every failed renew reaches OnRenewFailure (the supervisor counts them in
// leasebridge_renew_failures_total); a standby's failed polls do not.
func TestManagerReportsRenewFailures(t *testing.T) {
	cfg := testConfig(t, fastTiming, 20*time.Millisecond)
	st := NewMemStore()
	st.SetFaults(Faults{Partitioned: true})
	fails := make(chan error, 100)
	ev := make(chan Event, 100)
	m, err := NewManager(Options{Store: st, Key: "s", Identity: Identity{Node: "a", Owner: "a#t"}, Config: cfg,
		OnEvent: func(e Event) { ev <- e }, OnRenewFailure: func(err error) { fails <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(3 * cfg.AcquirePollInterval)
	if len(fails) != 0 {
		t.Fatalf("a standby reported %d renew failures", len(fails))
	}
	st.SetFaults(Faults{})
	next(t, ev, EventBecameOwner)
	st.SetFaults(Faults{Partitioned: true})
	select {
	case err := <-fails:
		if err == nil {
			t.Fatal("nil renew error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no renew failure reported while partitioned")
	}
}

// waitFor polls cond until it holds or limit (a hang guard) passes.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %v", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
