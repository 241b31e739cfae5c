package lease

import (
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// pollRow answers every read of c with row at revision rev, from start on,
// until c sends its takeover compare-and-swap or the instant limit
// passes. It returns the instant of the takeover (-1: none), the instant
// of the first read (the baseline) and every event.
func pollRow(t *testing.T, c *Core, row Row, rev int64, limit time.Duration) (cas, base time.Duration, evs []Event) {
	t.Helper()
	now := time.Duration(0)
	s := c.Tick(now)
	base = -1
	for now <= limit {
		wantOp(t, s, OpRead)
		now += time.Millisecond // the response
		if base < 0 {
			base = now
		}
		s = c.Done(now, Result{Row: row, Version: rev})
		evs = append(evs, s.Events...)
		if s.Op.Kind == OpCAS {
			if s.Op.Expect != rev {
				t.Fatalf("takeover CAS expects %d, want %d", s.Op.Expect, rev)
			}
			return now, base, evs
		}
		now = s.WakeAt
		s = c.Tick(now)
		evs = append(evs, s.Events...)
	}
	return -1, base, evs
}

func mismatches(evs []Event) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.Kind == EventTimingMismatch || ev.Kind == EventTimingMatch {
			out = append(out, ev)
		}
	}
	return out
}

// A row whose owner runs a longer lease_ttl is taken over no earlier than
// that lease_ttl after the baseline, not after the standby's own.
func TestRowLongerTTLDelaysTakeover(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	rt := cfg.RowTiming()
	rt.LeaseTTL = 5 * time.Second
	rt.FenceAfter = 4 * time.Second
	row := Row{Owner: "n2#b", Node: "n2", Epoch: 3, Timing: rt}
	cas, base, evs := pollRow(t, c, row, 7, 10*time.Second)
	if cas < 0 {
		t.Fatal("no takeover within 10s of an unchanged revision")
	}
	if cas-base < rt.LeaseTTL {
		t.Fatalf("takeover %v after the baseline: the owner's lease_ttl %v had not passed (own %v)", cas-base, rt.LeaseTTL, cfg.LeaseTTL)
	}
	hi, _ := admission.PollBoundary(cfg.AcquirePollInterval)
	if cas-base > rt.LeaseTTL+hi+time.Millisecond {
		t.Fatalf("takeover %v after the baseline, more than a poll past the owner's lease_ttl %v", cas-base, rt.LeaseTTL)
	}
	m := mismatches(evs)
	if len(m) != 1 || m[0].Kind != EventTimingMismatch || m[0].Timing.Row != rt || m[0].Timing.Own != cfg.RowTiming() ||
		m[0].Timing.Wait != rt.LeaseTTL || m[0].Timing.RowOwner != "n2#b" || m[0].At != base {
		t.Fatalf("want one mismatch event at the first read with wait %v, got %+v", rt.LeaseTTL, m)
	}
}

// A row whose owner runs a shorter lease_ttl does not shorten the
// standby's own wait.
func TestRowShorterTTLDoesNotShortenWait(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	rt := cfg.RowTiming()
	rt.LeaseTTL, rt.FenceAfter = time.Second, 800*time.Millisecond
	cas, base, evs := pollRow(t, c, Row{Owner: "n2#b", Node: "n2", Epoch: 3, Timing: rt}, 7, 10*time.Second)
	if cas < 0 || cas-base < cfg.LeaseTTL {
		t.Fatalf("takeover at %v after the baseline, want >= own lease_ttl %v", cas-base, cfg.LeaseTTL)
	}
	if m := mismatches(evs); len(m) != 1 || m[0].Timing.Wait != cfg.LeaseTTL {
		t.Fatalf("want one mismatch event with wait = own lease_ttl, got %+v", m)
	}
}

// A row without timing (an older binary) is judged by the standby's own
// lease_ttl and reported as a mismatch once, with an empty row timing.
func TestRowWithoutTimingUsesOwnTTLAndReportsOnce(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	cas, base, evs := pollRow(t, c, Row{Owner: "n2#b", Node: "n2", Epoch: 3}, 7, 10*time.Second)
	if cas < 0 || cas-base < cfg.LeaseTTL {
		t.Fatalf("takeover at %v after the baseline, want >= own lease_ttl %v", cas-base, cfg.LeaseTTL)
	}
	hi, _ := admission.PollBoundary(cfg.AcquirePollInterval)
	if cas-base > cfg.LeaseTTL+hi+time.Millisecond {
		t.Fatalf("takeover %v after the baseline, more than a poll past lease_ttl", cas-base)
	}
	m := mismatches(evs)
	if len(m) != 1 || m[0].Kind != EventTimingMismatch || m[0].Timing.Row != (RowTiming{}) || m[0].Timing.Wait != cfg.LeaseTTL {
		t.Fatalf("want exactly one mismatch event for a row without timing, got %+v", m)
	}
}

// A mismatch is reported once per change of the row's timing: a renewed
// row with the same timing is silent, a matching row clears the mismatch,
// and becoming owner after a mismatch clears it too.
func TestTimingEventsOnChangeOnly(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	other := cfg.RowTiming()
	other.RenewInterval *= 2
	read := func(now time.Duration, row Row, rev int64) []Event {
		t.Helper()
		wantOp(t, c.Tick(now), OpRead)
		s := c.Done(now+time.Millisecond, Result{Row: row, Version: rev})
		return mismatches(s.Events)
	}
	var now time.Duration
	next := func() time.Duration { now = c.nextAcquire; return now }
	if m := read(next(), Row{Owner: "n2#b", Epoch: 1, Timing: other}, 5); len(m) != 1 || m[0].Kind != EventTimingMismatch {
		t.Fatalf("first row with another timing: %+v", m)
	}
	if m := read(next(), Row{Owner: "n2#b", Epoch: 1, Timing: other}, 6); len(m) != 0 {
		t.Fatalf("renewed row with the same timing reported again: %+v", m)
	}
	if m := read(next(), Row{Owner: "n3#c", Epoch: 2, Timing: cfg.RowTiming()}, 7); len(m) != 1 || m[0].Kind != EventTimingMatch {
		t.Fatalf("matching row after a mismatch: %+v", m)
	}
	if m := read(next(), Row{Owner: "n2#b", Epoch: 3}, 8); len(m) != 1 || m[0].Kind != EventTimingMismatch {
		t.Fatalf("row without timing: %+v", m)
	}
	// The row is released: taken at once, and the mismatch ends.
	wantOp(t, c.Tick(next()), OpRead)
	wantOp(t, c.Done(now+time.Millisecond, Result{Row: Row{Epoch: 3}, Version: 9}), OpCAS)
	s := c.Done(now+2*time.Millisecond, Result{Version: 10})
	wantEvent(t, s, EventBecameOwner)
	if m := mismatches(s.Events); len(m) != 1 || m[0].Kind != EventTimingMatch {
		t.Fatalf("becoming owner after a mismatch: %+v", m)
	}
}
