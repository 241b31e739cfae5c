package lease

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

var testTiming = admission.Timing{
	LeaseTTL:            2 * time.Second,
	RenewInterval:       300 * time.Millisecond,
	RenewJitter:         100 * time.Millisecond,
	RenewCallTimeout:    200 * time.Millisecond,
	AcquirePollInterval: 400 * time.Millisecond,
	StepDownGrace:       time.Second,
	MaxRenewFails:       2,
}

func testConfig(t *testing.T, tm admission.Timing, closeBound time.Duration) Config {
	t.Helper()
	rep := admission.Evaluate(admission.Inputs{
		Session: "t", Timing: tm, BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
		Transports: []admission.Activation{{Name: "t", Close: closeBound}},
	})
	if !rep.Admitted() {
		t.Fatalf("refused: %v", rep.Refusals)
	}
	return ConfigFromReport(rep)
}

var me = Identity{Node: "n1", Owner: "n1#a"}

func newTestCore(t *testing.T, now time.Duration) (*Core, Config) {
	t.Helper()
	cfg := testConfig(t, testTiming, 100*time.Millisecond)
	c, err := NewCore(cfg, me, "k", rand.New(rand.NewPCG(1, 2)), now)
	if err != nil {
		t.Fatal(err)
	}
	return c, cfg
}

func wantOp(t *testing.T, s Step, kind OpKind) Op {
	t.Helper()
	if s.Op.Kind != kind {
		t.Fatalf("op = %v, want %v (step %+v)", s.Op.Kind, kind, s)
	}
	return s.Op
}

func wantEvent(t *testing.T, s Step, kind EventKind) Event {
	t.Helper()
	for _, ev := range s.Events {
		if ev.Kind == kind {
			return ev
		}
	}
	t.Fatalf("no %v event in %+v", kind, s.Events)
	return Event{}
}

// own takes a missing row: read at 0, CAS at 10ms, landed at 20ms.
func own(t *testing.T) (*Core, Config) {
	t.Helper()
	c, cfg := newTestCore(t, 0)
	op := wantOp(t, c.Tick(0), OpRead)
	if op.Deadline != cfg.RenewCallTimeout {
		t.Fatalf("read deadline %v, want renew_call_timeout", op.Deadline)
	}
	cas := wantOp(t, c.Done(10*time.Millisecond, Result{}), OpCAS)
	if cas.Expect != 0 || cas.Row != (Row{Owner: me.Owner, Node: me.Node, Epoch: 1, Timing: cfg.RowTiming()}) || cas.Deadline != op.Deadline {
		t.Fatalf("takeover CAS %+v: want expect 0, epoch 1, the read's deadline", cas)
	}
	s := c.Done(20*time.Millisecond, Result{Version: 5})
	ev := wantEvent(t, s, EventBecameOwner)
	if ev.Epoch != 1 || ev.Observed != 10*time.Millisecond {
		t.Fatalf("became owner %+v", ev)
	}
	if _, dl, ok := c.Owner(); !ok || dl != 10*time.Millisecond+cfg.FenceAfter {
		t.Fatalf("deadline %v, want CAS send (10ms) + fence_after", dl)
	}
	return c, cfg
}

func TestTakesMissingRowInOneCall(t *testing.T) { own(t) }

func TestTakeoverOnlyAfterLeaseTTLOfUnchangedRevision(t *testing.T) {
	c, cfg := newTestCore(t, 0)
	other := Row{Owner: "n2#b", Node: "n2", Epoch: 4}
	now := time.Duration(0)
	s := c.Tick(now)
	var base time.Duration
	rev := int64(7)
	lo := admission.MinJitteredPoll(cfg.AcquirePollInterval)
	hi, _ := admission.PollBoundary(cfg.AcquirePollInterval)
	for i := 0; ; i++ {
		wantOp(t, s, OpRead)
		now += 3 * time.Millisecond
		if i == 2 {
			rev = 9 // the owner renewed: a new baseline
		}
		s = c.Done(now, Result{Row: other, Version: rev})
		if i == 0 || i == 2 {
			base = now
		}
		if s.Op.Kind == OpCAS {
			if now-base < cfg.LeaseTTL || i < 3 {
				t.Fatalf("takeover CAS %v after the baseline, before lease_ttl %v", now-base, cfg.LeaseTTL)
			}
			if s.Op.Expect != 9 || s.Op.Row.Epoch != 5 {
				t.Fatalf("takeover %+v, want CAS on revision 9 to epoch 5", s.Op)
			}
			ev := wantEvent(t, c.Done(now+time.Millisecond, Result{Version: 10}), EventBecameOwner)
			if ev.Observed != base {
				t.Fatalf("observed %v, want the baseline %v", ev.Observed, base)
			}
			return
		}
		if w := s.WakeAt - now; w < lo || w > hi {
			t.Fatalf("poll wait %v outside [%v, %v]", w, lo, hi)
		}
		now = s.WakeAt
		s = c.Tick(now)
	}
}

func TestReleasedRowTakenAtOnce(t *testing.T) {
	c, _ := newTestCore(t, 0)
	wantOp(t, c.Tick(0), OpRead)
	op := wantOp(t, c.Done(time.Millisecond, Result{Row: Row{Epoch: 8}, Version: 3}), OpCAS)
	if op.Expect != 3 || op.Row.Epoch != 9 {
		t.Fatalf("takeover of a released row: %+v", op)
	}
}

func TestRenewDeadlineFromSendInstant(t *testing.T) {
	c, cfg := own(t)
	s := c.Tick(20 * time.Millisecond)
	half := cfg.RenewJitter / 2
	if w := s.WakeAt - 20*time.Millisecond; w < cfg.RenewInterval-half || w > cfg.RenewInterval+half {
		t.Fatalf("renew after %v, want renew_interval +- jitter/2", w)
	}
	sent := s.WakeAt
	op := wantOp(t, c.Tick(sent), OpCAS)
	if op.Expect != 5 || op.Deadline != sent+cfg.RenewCallTimeout {
		t.Fatalf("renew %+v", op)
	}
	c.Done(sent+150*time.Millisecond, Result{Version: 11})
	if _, dl, _ := c.Owner(); dl != sent+cfg.FenceAfter {
		t.Fatalf("deadline %v, want renew send %v + fence_after", dl, sent)
	}
}

func TestLostRenewResponsesAdopted(t *testing.T) {
	c, cfg := own(t)
	lost := errors.New("timeout")
	// Renews whose responses are lost, max_renew_fails in a row.
	var sends []time.Duration
	var now time.Duration
	var s Step
	for i := range cfg.MaxRenewFails {
		now = c.nextRenew
		wantOp(t, c.Tick(now), OpCAS)
		sends = append(sends, now)
		s = c.Done(now+cfg.RenewCallTimeout, Result{Err: lost})
		if i < cfg.MaxRenewFails-1 && s.Op.Kind != OpNone {
			t.Fatalf("authoritative read before max_renew_fails: %+v", s.Op)
		}
	}
	wantOp(t, s, OpAuthRead)
	s = c.Done(now+cfg.RenewCallTimeout+time.Millisecond, Result{Row: Row{Owner: me.Owner, Node: me.Node, Epoch: 1}, Version: 12})
	if len(s.Events) != 0 {
		t.Fatalf("events %+v on adoption", s.Events)
	}
	if _, dl, ok := c.Owner(); !ok || dl != sends[0]+cfg.FenceAfter {
		t.Fatalf("after adoption deadline %v, want first unacknowledged renew %v + fence_after", dl, sends[0])
	}
	op := wantOp(t, c.Tick(c.nextRenew), OpCAS)
	if op.Expect != 12 {
		t.Fatalf("next renew expects %d, want the adopted revision 12", op.Expect)
	}
}

func TestFenceAndHoldBeforeReclaim(t *testing.T) {
	c, cfg := own(t)
	_, dl, _ := c.Owner()
	s := c.Tick(dl)
	wantEvent(t, s, EventFenced)
	if c.State() != StateStandby {
		t.Fatal("not standby after fence")
	}
	if hold := dl + cfg.LeaseTTL - cfg.FenceAfter; s.WakeAt != hold {
		t.Fatalf("next acquire at %v, want old deadline + lease_ttl - fence_after = %v", s.WakeAt, hold)
	}
}

func TestConflictThenOtherOwnerIsLost(t *testing.T) {
	c, _ := own(t)
	now := c.nextRenew
	wantOp(t, c.Tick(now), OpCAS)
	wantOp(t, c.Done(now+time.Millisecond, Result{Err: ErrConflict}), OpAuthRead)
	s := c.Done(now+2*time.Millisecond, Result{Row: Row{Owner: "n2#b", Epoch: 2}, Version: 30})
	wantEvent(t, s, EventLost)
	if c.State() != StateStandby {
		t.Fatal("not standby after loss")
	}
}

func TestReleaseResolvesOwnLandedWrite(t *testing.T) {
	c, _ := own(t)
	now := 30 * time.Millisecond
	op := wantOp(t, c.Release(now), OpRelease)
	if op.Expect != 5 || op.Row != (Row{Epoch: 1}) {
		t.Fatalf("release %+v", op)
	}
	wantOp(t, c.Done(now+time.Millisecond, Result{Err: ErrConflict}), OpAuthRead)
	op = wantOp(t, c.Done(now+2*time.Millisecond, Result{Row: Row{Owner: me.Owner, Epoch: 1}, Version: 6}), OpRelease)
	if op.Expect != 6 {
		t.Fatalf("second release expects %d, want 6", op.Expect)
	}
	ev := wantEvent(t, c.Done(now+3*time.Millisecond, Result{}), EventReleased)
	if ev.Err != nil || c.State() != StateStopped {
		t.Fatalf("released %+v state %v", ev, c.State())
	}
}

func TestConfigValidateRefusesLateFence(t *testing.T) {
	cfg := testConfig(t, testTiming, 0)
	cfg.FenceAfter = cfg.LeaseTTL
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("fence_after = lease_ttl accepted: %v", err)
	}
}

// pollUntil answers the core's reads with r until it asks for something
// else, and returns that step and its instant.
func pollUntil(t *testing.T, c *Core, now time.Duration, r Result) (Step, time.Duration) {
	t.Helper()
	s := c.Tick(now)
	for i := 0; i < 1000; i++ {
		if s.Op.Kind != OpRead {
			if s.WakeAt == Never {
				t.Fatalf("core idle at %v: %+v", now, s)
			}
			now = s.WakeAt
			s = c.Tick(now)
			continue
		}
		now += time.Millisecond
		if s = c.Done(now, r); s.Op.Kind != OpNone {
			return s, now
		}
	}
	t.Fatal("no takeover after 1000 polls")
	return Step{}, 0
}

// deferConfig is testConfig with the takeover deferral admission gives
// testTiming, returned too, and the poll boundary.
func deferConfig(t *testing.T) (cfg Config, deferral, pb time.Duration) {
	t.Helper()
	cfg = testConfig(t, testTiming, 100*time.Millisecond)
	d, err := admission.TakeoverDeferral(testTiming)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TakeoverDeferral = d
	pb, _ = admission.PollBoundary(cfg.AcquirePollInterval)
	return cfg, d, pb
}

// A deferring standby takes another owner's stale row TakeoverDeferral
// later than lease_ttl, and a free row TakeoverDeferral after it first
// saw it free; a deferral for another owner, or none, changes nothing.
func TestDeferDelaysTakeoverOnly(t *testing.T) {
	cfg, d, pb := deferConfig(t)
	stale := Result{Row: Row{Owner: "n2#b", Node: "n2", Epoch: 3, Timing: cfg.RowTiming()}, Version: 7}
	free := Result{Row: Row{Epoch: 3}, Version: 8}
	for _, tc := range []struct {
		name     string
		r        Result
		owner    string
		on       bool
		min, max time.Duration // of the takeover instant, first read at 1ms
	}{
		{"stale, not deferred", stale, "", false, cfg.LeaseTTL, cfg.LeaseTTL + pb + 10*time.Millisecond},
		{"stale, deferred", stale, "n2#b", true, cfg.LeaseTTL + d, cfg.LeaseTTL + d + pb + 10*time.Millisecond},
		{"stale, other owner deferred", stale, "n3#c", true, cfg.LeaseTTL, cfg.LeaseTTL + pb + 10*time.Millisecond},
		{"free, not deferred", free, "", false, 0, 2 * time.Millisecond},
		{"free, deferred", free, "", true, d, d + pb + 10*time.Millisecond},
	} {
		c, err := NewCore(cfg, me, "k", rand.New(rand.NewPCG(3, 4)), 0)
		if err != nil {
			t.Fatal(err)
		}
		c.Defer(tc.owner, tc.on)
		s, at := pollUntil(t, c, 0, tc.r)
		op := wantOp(t, s, OpCAS)
		if at < tc.min || at > tc.max || op.Expect != tc.r.Version {
			t.Errorf("%s: takeover CAS at %v expecting %d, want in [%v, %v] expecting %d", tc.name, at, op.Expect, tc.min, tc.max, tc.r.Version)
		}
	}
}

// A row its deferred holder released in a handover right after this core
// saw it held is deferred too; one released for a lost path is not.
func TestDeferFollowsAHandoverRelease(t *testing.T) {
	cfg, d, pb := deferConfig(t)
	held := Result{Row: Row{Owner: "n2#b", Node: "n2", Epoch: 3, Timing: cfg.RowTiming()}, Version: 7}
	for _, tc := range []struct {
		cause    string
		min, max time.Duration // of the takeover after the first read of the released row
	}{{ReleaseCauseHandover, d, d + pb + time.Millisecond}, {"device_path", 0, 0}} {
		c, err := NewCore(cfg, me, "k", rand.New(rand.NewPCG(5, 6)), 0)
		if err != nil {
			t.Fatal(err)
		}
		c.Defer("n2#b", true)
		wantOp(t, c.Tick(0), OpRead)
		wake := c.Done(time.Millisecond, held).WakeAt
		first := wake + time.Millisecond // pollUntil answers 1ms after each read
		released := Result{Row: Row{Epoch: 3, Release: &Release{Cause: tc.cause}}, Version: 8}
		s, at := pollUntil(t, c, wake, released)
		if op := wantOp(t, s, OpCAS); op.Expect != 8 || at-first < tc.min || at-first > tc.max {
			t.Errorf("%s release: CAS expecting %d %v after the first read, want in [%v, %v]", tc.cause, op.Expect, at-first, tc.min, tc.max)
		}
	}
}

// takeTimedOut takes a missing row with a read whose response takes
// 120ms, then a compare-and-swap (sent at 120ms, epoch 1) that times out
// at the shared renew_call_timeout, 200ms, whatever became of it: the
// store's round trip between half and one renew_call_timeout. fed: the
// read is a RowSource's (Feed). It returns when the next Acquire read is
// due.
func takeTimedOut(t *testing.T, c *Core, cfg Config, fed bool) (next time.Duration) {
	t.Helper()
	var s Step
	if fed {
		c.SetFed(true)
		s = c.Feed(120*time.Millisecond, 0, Result{})
	} else {
		wantOp(t, c.Tick(0), OpRead)
		s = c.Done(120*time.Millisecond, Result{})
	}
	op := wantOp(t, s, OpCAS)
	if op.Row.Epoch != 1 || op.Deadline != cfg.RenewCallTimeout {
		t.Fatalf("takeover CAS %+v, want epoch 1 by the read's deadline", op)
	}
	s = c.Done(cfg.RenewCallTimeout, Result{Err: errors.New("context deadline exceeded")})
	if s.Op.Kind != OpNone || len(s.Events) != 0 || c.State() != StateStandby {
		t.Fatalf("after the timed-out CAS: step %+v, state %v", s, c.State())
	}
	if fed {
		return cfg.RenewCallTimeout + 300*time.Millisecond
	}
	if s.WakeAt == Never {
		t.Fatal("no next Acquire after the timed-out CAS")
	}
	return s.WakeAt
}

// acquireRead makes the next Acquire read at sent (the core's own, or a
// RowSource's) and answers it with r at sent+120ms.
func acquireRead(t *testing.T, c *Core, sent time.Duration, fed bool, r Result) Step {
	t.Helper()
	if fed {
		return c.Feed(sent+120*time.Millisecond, sent, r)
	}
	wantOp(t, c.Tick(sent), OpRead)
	return c.Done(sent+120*time.Millisecond, r)
}

// A takeover CAS that timed out but landed: the next Acquire read shows
// the row ours with exactly that CAS's epoch. The core becomes owner from
// that read, its fence deadline anchored at the CAS's send, and issues no
// second CAS; before, each re-take wrote epoch+1 and timed out again,
// moving the row for ever so that no standby could take it (lab: the drop
// after a fence on docs/measured-failover.md).
func TestTimedOutTakeoverThatLandedAdopted(t *testing.T) {
	for _, fed := range []bool{false, true} {
		c, cfg := newTestCore(t, 0)
		sent := takeTimedOut(t, c, cfg, fed)
		mine := Row{Owner: me.Owner, Node: me.Node, Epoch: 1, Timing: cfg.RowTiming()}
		s := acquireRead(t, c, sent, fed, Result{Row: mine, Version: 9})
		if s.Op.Kind != OpNone {
			t.Fatalf("fed %v: %v expecting %d to epoch %d after the landed CAS, want none", fed, s.Op.Kind, s.Op.Expect, s.Op.Row.Epoch)
		}
		ev := wantEvent(t, s, EventBecameOwner)
		if ev.Epoch != 1 || ev.Observed != 120*time.Millisecond || ev.Took != (Row{}) {
			t.Fatalf("fed %v: became owner %+v, want epoch 1 observed at the first read (120ms), the missing row taken", fed, ev)
		}
		if _, dl, ok := c.Owner(); !ok || dl != 120*time.Millisecond+cfg.FenceAfter {
			t.Fatalf("fed %v: deadline %v, want the CAS's send (120ms) + fence_after %v", fed, dl, cfg.FenceAfter)
		}
		op := wantOp(t, c.Tick(c.nextRenew), OpCAS)
		if op.Expect != 9 || op.Row.Epoch != 1 {
			t.Fatalf("fed %v: first renew %+v, want expect 9, epoch 1", fed, op)
		}
	}
}

// A row of this identity with another epoch, or with that epoch only
// after the CAS's fence interval has passed, is not the timed-out CAS
// adopted: it gets a fresh compare-and-swap.
func TestOwnRowNotOfTheTimedOutCASRetaken(t *testing.T) {
	for _, fed := range []bool{false, true} {
		c, cfg := newTestCore(t, 0)
		sent := takeTimedOut(t, c, cfg, fed)
		// A renew of an earlier term of ours, landed late.
		old := Row{Owner: me.Owner, Node: me.Node, Epoch: 4, Timing: cfg.RowTiming()}
		s := acquireRead(t, c, sent, fed, Result{Row: old, Version: 9})
		if op := wantOp(t, s, OpCAS); op.Expect != 9 || op.Row.Epoch != 5 || len(s.Events) != 0 {
			t.Fatalf("fed %v: %+v events %+v, want a fresh CAS expecting 9 to epoch 5", fed, op, s.Events)
		}

		c, cfg = newTestCore(t, 0)
		takeTimedOut(t, c, cfg, fed)
		late := 120*time.Millisecond + cfg.FenceAfter // the CAS's fence deadline
		mine := Row{Owner: me.Owner, Node: me.Node, Epoch: 1, Timing: cfg.RowTiming()}
		s = acquireRead(t, c, late, fed, Result{Row: mine, Version: 9})
		if op := wantOp(t, s, OpCAS); op.Expect != 9 || op.Row.Epoch != 2 || len(s.Events) != 0 {
			t.Fatalf("fed %v, past the CAS's fence deadline: %+v events %+v, want a fresh CAS expecting 9 to epoch 2", fed, op, s.Events)
		}
	}
}

// A standby that never sent a takeover, released with
// ReleaseNeverWritten, stops at once: the row cannot be its own. Once it
// sent one (whose response was lost), it reads the row first, as Release
// always does.
func TestReleaseNeverWrittenSkipsTheRead(t *testing.T) {
	c, _ := newTestCore(t, 0)
	wantOp(t, c.Tick(0), OpRead)
	c.Done(time.Millisecond, Result{Err: ErrUnavailable})
	ev := wantEvent(t, c.ReleaseNeverWritten(2*time.Millisecond), EventReleased)
	if ev.Err != nil || c.State() != StateStopped {
		t.Fatalf("released %+v state %v", ev, c.State())
	}

	c, _ = newTestCore(t, 0)
	wantOp(t, c.Tick(0), OpRead)
	wantOp(t, c.Done(time.Millisecond, Result{}), OpCAS) // no row: take it
	c.Done(2*time.Millisecond, Result{Err: ErrUnavailable})
	wantOp(t, c.ReleaseNeverWritten(3*time.Millisecond), OpAuthRead)
}
