package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// A batched owner renews when asked, ahead of its timer; its deadline is
// anchored at the instant the batch call began, and its own timer waits
// the longest admitted delay.
func TestCoreRenewNowAnchorsAtTheBatch(t *testing.T) {
	c, cfg := own(t)
	c.SetBatched(true)
	s, renew := c.RenewNow(100 * time.Millisecond)
	op := wantOp(t, s, OpCAS)
	if !renew || op.Expect != 5 || op.Deadline != 100*time.Millisecond+cfg.RenewCallTimeout {
		t.Fatalf("RenewNow = %+v, %v: want the renew at once, expect 5", op, renew)
	}
	if s, again := c.RenewNow(105 * time.Millisecond); again || s.Op.Kind != OpNone {
		t.Fatalf("a second RenewNow with the renew outstanding issued %+v", s.Op)
	}
	// Issued at 100ms, carried by a batch call that began at 110ms.
	s = c.Done(130*time.Millisecond, Result{Version: 8, Sent: 110 * time.Millisecond})
	if _, dl, _ := c.Owner(); dl != 110*time.Millisecond+cfg.FenceAfter {
		t.Fatalf("deadline %v, want the batch's start 110ms + fence_after", dl)
	}
	if want := 130*time.Millisecond + cfg.RenewInterval + cfg.RenewJitter/2; s.WakeAt != want {
		t.Fatalf("own renew timer at %v, want the response + renew_interval + jitter/2 = %v", s.WakeAt, want)
	}
	op = wantOp(t, c.Tick(s.WakeAt), OpCAS)
	if op.Expect != 8 {
		t.Fatalf("own renew %+v: want expect 8", op)
	}
}

// A row taken over inside a batch: the conflict sends the authoritative
// read at once, which finds the other owner.
func TestCoreBatchConflictLearnsAtOnce(t *testing.T) {
	c, _ := own(t)
	c.SetBatched(true)
	s, _ := c.RenewNow(100 * time.Millisecond)
	wantOp(t, s, OpCAS)
	conflict := fmt.Errorf("batch: %w", ErrConflict)
	wantOp(t, c.Done(120*time.Millisecond, Result{Err: conflict, Sent: 105 * time.Millisecond}), OpAuthRead)
	other := Row{Owner: "n2#b", Node: "n2", Epoch: 2}
	wantEvent(t, c.Done(130*time.Millisecond, Result{Row: other, Version: 9}), EventLost)
	if c.State() != StateStandby {
		t.Fatalf("state %v after the loss", c.State())
	}
}

// A batch whose outcome is unknown is resolved like a single renew: after
// max_renew_fails the authoritative read adopts the revision one of them
// wrote, anchored at the first unknown batch's start.
func TestCoreUnknownBatchResolved(t *testing.T) {
	c, cfg := own(t)
	c.SetBatched(true)
	lost := fmt.Errorf("batch: %w", ErrUnavailable)
	s, _ := c.RenewNow(100 * time.Millisecond)
	wantOp(t, s, OpCAS)
	if s := c.Done(300*time.Millisecond, Result{Err: lost, Sent: 110 * time.Millisecond}); s.Op.Kind != OpNone {
		t.Fatalf("one unknown batch (max_renew_fails %d) issued %+v", cfg.MaxRenewFails, s.Op)
	}
	s, _ = c.RenewNow(400 * time.Millisecond)
	wantOp(t, s, OpCAS)
	wantOp(t, c.Done(600*time.Millisecond, Result{Err: lost, Sent: 410 * time.Millisecond}), OpAuthRead)
	mine := Row{Owner: me.Owner, Node: me.Node, Epoch: 1, Timing: cfg.RowTiming()}
	c.Done(620*time.Millisecond, Result{Row: mine, Version: 11})
	if _, dl, ok := c.Owner(); !ok || dl != 110*time.Millisecond+cfg.FenceAfter {
		t.Fatalf("deadline %v (owner %v), want the first unknown batch's start + fence_after", dl, ok)
	}
}

// batchNode is one process of managers sharing a Renewer and a RowSource.
type batchNode struct {
	ren    *Renewer
	cancel context.CancelFunc
	done   chan struct{}
	events chan Event
	// renewErrs holds the latest renew failure of any session (cap 1).
	renewErrs chan error
}

func startBatchNode(t *testing.T, st *MemStore, name string, cfg Config, keys []string) *batchNode {
	t.Helper()
	ren, err := NewRenewer(RenewerOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewRowSource(RowSourceOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &batchNode{ren: ren, cancel: cancel, done: make(chan struct{}), events: make(chan Event, 100*len(keys)), renewErrs: make(chan error, 1)}
	stopped := make(chan struct{}, len(keys))
	for _, k := range keys {
		m, err := NewManager(Options{Store: st, Key: k, Identity: Identity{Node: name, Owner: name + "#t"}, Config: cfg,
			Rows: src, Renewer: ren, OnEvent: func(e Event) { n.events <- e },
			OnRenewFailure: func(err error) {
				for { // keep only the latest, never block
					select {
					case n.renewErrs <- err:
						return
					default:
					}
					select {
					case <-n.renewErrs:
					default:
					}
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = m.Run(ctx); stopped <- struct{}{} }()
	}
	go func() {
		for range keys {
			<-stopped
		}
		close(n.done)
	}()
	t.Cleanup(func() { cancel(); <-n.done })
	return n
}

// Three nodes of 30 sessions, renewing in batches: the owner renews every
// row each round in about one store call, never fences, a row taken from
// it inside a batch is lost at once, and when it stops the others take
// every session over within the owner-death budget and renew in batches.
func TestRenewerFleet(t *testing.T) {
	cfg := testConfig(t, benchTiming, 20*time.Millisecond)
	st := NewMemStore()
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("s%02d", i)
	}
	a := startBatchNode(t, st, "a", cfg, keys)
	waitFor(t, 10*time.Second, func() bool { return owners(st, keys, "a") == len(keys) })
	startBatchNode(t, st, "b", cfg, keys)
	startBatchNode(t, st, "c", cfg, keys)

	calls0, w0, start := st.WriteCalls(), st.Writes(keys[0]), time.Now()
	waitFor(t, 10*time.Second, func() bool { return st.Writes(keys[0])-w0 >= 10 })
	calls, rounds := st.WriteCalls()-calls0, float64(time.Since(start))/float64(cfg.RenewInterval-cfg.RenewJitter/2)
	t.Logf("%d write calls in %.1f rounds of %d sessions; renewer: %d calls, %d renews", calls, rounds, len(keys), a.ren.Calls(), a.ren.Renews())
	// One batch per tick; a manager busy when asked (a loaded machine)
	// renews alone. Per session it would be 30 a round.
	if float64(calls) > 2*rounds+3 {
		t.Fatalf("%d write calls in %.1f renew rounds for %d sessions", calls, rounds, len(keys))
	}
	if a.ren.Calls() == 0 {
		t.Fatal("the owner's renewer made no call")
	}

	// Take one row from a behind its back: its next batch conflicts.
	_, ver := st.Get(keys[3])
	if _, err := st.CompareAndSwap(context.Background(), keys[3], ver, Row{Owner: "x#1", Node: "x", Epoch: 99}); err != nil {
		t.Fatal(err)
	}
	took := time.Now()
	budget, err := admission.OwnerDeath(benchTiming, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range a.events {
		if ev.Kind == EventFenced {
			t.Fatalf("a batched owner fenced: %+v", ev)
		}
		if ev.Kind == EventLost {
			break
		}
	}
	// A takeover is announced within the owner-death budget; the owner
	// learns of it at its next batch, far sooner.
	if d := time.Since(took); d > budget.Total {
		t.Fatalf("the loss was seen %v after the takeover, over the owner-death budget %v", d, budget.Total)
	}
	if err := <-a.renewErrs; !errors.Is(err, ErrConflict) {
		t.Fatalf("the loss followed the renew failure %v, want the batch's conflict", err)
	}
	if n := owners(st, keys, "a"); n != len(keys)-1 {
		t.Fatalf("a owns %d of the other %d rows after losing one", n, len(keys)-1)
	}

	a.cancel()
	<-a.done
	stopped := time.Now()
	waitFor(t, 10*budget.Total, func() bool { return owners(st, keys, "b")+owners(st, keys, "c") == len(keys) })
	if d := time.Since(stopped); d > budget.Total {
		t.Fatalf("takeover of every session took %v, budget %v", d, budget.Total)
	}
}

// CompareAndSwapBatch on the in-memory store: each swap on its own
// compare, one call.
func TestMemStoreBatch(t *testing.T) {
	st := NewMemStore()
	ctx := context.Background()
	v1, _ := st.CompareAndSwap(ctx, "a", 0, Row{Owner: "o", Epoch: 1})
	res, err := st.CompareAndSwapBatch(ctx, []Swap{{Key: "a", Expect: v1, Row: Row{Owner: "o", Epoch: 1}}, {Key: "b", Expect: 7, Row: Row{Owner: "o"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Version <= v1 || !errors.Is(res[1].Err, ErrConflict) {
		t.Fatalf("batch results %+v: want a's new version and b's conflict", res)
	}
	if st.WriteCalls() != 2 {
		t.Fatalf("%d write calls, want 2", st.WriteCalls())
	}
}

// A renewer's ticks come before a batched core's own timer by at least
// twice its wait for answers, and never sooner than half a renew period.
func TestTickRangeBeforeTheOwnTimer(t *testing.T) {
	for _, tm := range []admission.Timing{testTiming, benchTiming} {
		cfg := testConfig(t, tm, 20*time.Millisecond)
		lo, hi := TickRange(cfg)
		own := cfg.RenewInterval + cfg.RenewJitter/2
		if hi > own-2*collectWait(cfg.RenewCallTimeout) || lo > hi || lo < (cfg.RenewInterval-cfg.RenewJitter/2)/2 {
			t.Fatalf("TickRange(%+v) = [%v, %v]: want within [(R-J/2)/2, %v - 2*%v]", tm, lo, hi, own, collectWait(cfg.RenewCallTimeout))
		}
	}
}
