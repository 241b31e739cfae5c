package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// A suspend (Now jumps ahead of Go's timers) past the fence deadline is
// acted on by the process's clock watcher, long before the owner's next
// renew or its watchdog timer would have woken it.
func TestSuspendPastDeadlineFencesAtResume(t *testing.T) {
	tm := admission.Timing{LeaseTTL: 20 * time.Second, RenewInterval: 5 * time.Second, RenewJitter: time.Second,
		RenewCallTimeout: time.Second, AcquirePollInterval: time.Second, StepDownGrace: time.Second, MaxRenewFails: 2}
	cfg := testConfig(t, tm, 20*time.Millisecond)
	var shift atomic.Int64
	clock := func() time.Duration { return Now() + time.Duration(shift.Load()) }
	_, ev, _ := startManager(t, Options{Store: NewMemStore(), Key: "s", Identity: Identity{Node: "a", Owner: "a#t"}, Config: cfg, Clock: clock})
	o := next(t, ev, EventBecameOwner).Owner

	// The machine "resumes" a lease_ttl later: the deadline has passed.
	jump := int64(cfg.LeaseTTL)
	shift.Add(jump)
	bootShift.Add(jump)
	t.Cleanup(func() { bootShift.Add(-jump) })
	resumedAt := time.Now()
	// Without the watcher nothing wakes before the next renew round.
	limit := tm.RenewInterval - tm.RenewJitter/2
	select {
	case <-o.Context().Done():
	case <-time.After(limit):
		t.Fatalf("owner context still live %v after a resume past its deadline", limit)
	}
	if !errors.Is(context.Cause(o.Context()), ErrFenced) {
		t.Fatalf("cause %v, want ErrFenced", context.Cause(o.Context()))
	}
	next(t, ev, EventFenced)
	t.Logf("fenced %v after the resume (watch slice %v)", time.Since(resumedAt), watchSlice)
}

// An idle owner's run loop and watchdog do not wake at a fixed slice: in
// a quarter of a renew interval, nothing but the renew happens.
func TestIdleOwnerSleepsUntilItsRenew(t *testing.T) {
	tm := admission.Timing{LeaseTTL: 20 * time.Second, RenewInterval: 4 * time.Second, RenewJitter: time.Second,
		RenewCallTimeout: time.Second, AcquirePollInterval: time.Second, StepDownGrace: time.Second, MaxRenewFails: 2}
	cfg := testConfig(t, tm, 20*time.Millisecond)
	var calls atomic.Int64
	clock := func() time.Duration { calls.Add(1); return Now() }
	st := NewMemStore()
	_, ev, _ := startManager(t, Options{Store: st, Key: "s", Identity: Identity{Node: "a", Owner: "a#t"}, Config: cfg, Clock: clock})
	next(t, ev, EventBecameOwner)
	// Count clock reads over a window that ends before the first renew
	// (renew_interval - jitter/2 after the takeover at the earliest).
	c0, w0 := calls.Load(), st.Writes("s")
	time.Sleep(tm.RenewInterval/2 - tm.RenewJitter/2)
	if st.Writes("s") == w0 {
		if got := calls.Load() - c0; got != 0 {
			t.Fatalf("an idle owner read its clock %d times between renews", got)
		}
	}
}
