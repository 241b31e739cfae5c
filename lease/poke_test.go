package lease

import (
	"testing"
	"time"
)

// PollNow makes a standby read at once instead of at its next poll, takes
// a released row in the same acquire, and never shortens the wait on a
// live owner's revision.
func TestPollNowReadsAtOnceButWaitsOutLiveRows(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	wantOp(t, c.Tick(0), OpRead)
	other := Row{Owner: "n2#b", Node: "n2", Epoch: 3, Timing: cfg.RowTiming()}
	s := c.Done(5*time.Millisecond, Result{Row: other, Version: 7})
	if s.Op.Kind != OpNone || s.WakeAt <= 5*time.Millisecond {
		t.Fatalf("after reading a live row: %+v, want a wait for the next poll", s)
	}
	// Poked before the next poll: it reads now.
	wantOp(t, c.PollNow(10*time.Millisecond), OpRead)
	// The same revision, far less than lease_ttl later: no takeover.
	if s := c.Done(15*time.Millisecond, Result{Row: other, Version: 7}); s.Op.Kind != OpNone {
		t.Fatalf("took over a live row %v after the first observation: %+v", 10*time.Millisecond, s)
	}
	// Released: taken in the same acquire.
	wantOp(t, c.PollNow(20*time.Millisecond), OpRead)
	cas := wantOp(t, c.Done(25*time.Millisecond, Result{Row: Row{Epoch: 3}, Version: 8}), OpCAS)
	if cas.Expect != 8 || cas.Row.Epoch != 4 {
		t.Fatalf("CAS %+v: want expect 8, epoch 4", cas)
	}
	// An owner ignores a poke.
	wantEvent(t, c.Done(30*time.Millisecond, Result{Version: 9}), EventBecameOwner)
	if s := c.PollNow(40 * time.Millisecond); s.Op.Kind != OpNone {
		t.Fatalf("owner poked: %+v", s)
	}
}
