package lease

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Never is the WakeAt of a core with nothing scheduled.
const Never = time.Duration(math.MaxInt64)

// OpKind names a store call the core asks for.
type OpKind uint8

// Store calls.
const (
	OpNone     OpKind = iota // nothing to call; wait until Step.WakeAt
	OpRead                   // Store.Read
	OpCAS                    // Store.CompareAndSwap(Expect, Row)
	OpAuthRead               // Store.ReadAuthoritative
	OpRelease                // Store.Release(Expect, Row.Epoch)
)

var opNames = [...]string{"none", "read", "cas", "authread", "release"}

// String names the call in traces and errors.
func (k OpKind) String() string { return opNames[k] }

// Op is one store call. The caller must give up at Deadline (an instant on
// the core's clock) and report the outcome with Core.Done.
type Op struct {
	Kind     OpKind
	Key      string
	Expect   int64
	Row      Row
	Deadline time.Duration
}

// Result is the outcome of an Op: the row and version a read returned or
// the version a write produced, or the call's error.
type Result struct {
	Row     Row
	Version int64
	Err     error
	// Sent, for an Op carried in a batch (Renewer), is when the batch
	// call began on the core's clock: later than the Op was issued, and no
	// later than the request that carried it was sent. Done anchors the
	// renew's fence deadline there. Zero: the Op was sent when issued.
	Sent time.Duration
}

// EventKind names a change of ownership, or of what a standby knows
// about the owner's timing.
type EventKind uint8

// Events.
const (
	// EventBecameOwner: this manager holds the row; serve until fenced.
	EventBecameOwner EventKind = iota + 1
	// EventLost: the authoritative read found another owner.
	EventLost
	// EventFenced: the self-fence deadline passed; stop serving at once.
	EventFenced
	// EventReleased: the manager gave the row up and stopped.
	EventReleased
	// EventTimingMismatch: the row's owner wrote a timing different from
	// this manager's own, or none at all (an older binary). Reported once
	// per change of the observed timing, not at every poll.
	EventTimingMismatch
	// EventTimingMatch: after a mismatch, the row's owner (this manager
	// itself, after a takeover) runs this manager's timing again.
	EventTimingMatch
)

var eventNames = [...]string{"", "became_owner", "lost", "fenced", "released", "timing_mismatch", "timing_match"}

// String names the event in logs.
func (k EventKind) String() string { return eventNames[k] }

// Event reports a change of ownership.
type Event struct {
	Kind EventKind
	// Epoch is the fencing token of the ownership term concerned (0 for a
	// release by a manager that owned nothing).
	Epoch uint64
	// At is when the core saw the change, on the core's clock.
	At time.Duration
	// Observed, for EventBecameOwner, is when this manager first observed
	// the row it took over (stale, released or missing): the start of
	// FailureToFullDuration.
	Observed time.Duration
	// Err, for EventReleased, is the release call's error (nil: landed).
	Err error
	// Took, for EventBecameOwner, is the row taken over: zero when it
	// never had an owner, with an empty owner when it was released.
	Took Row
	// Owner, set by Manager for EventBecameOwner, is the owner handle.
	Owner *Owner
	// Timing, for EventTimingMismatch and EventTimingMatch, compares this
	// manager's timing with the row owner's.
	Timing TimingReport
}

// TimingReport compares this manager's timing with the one the row's
// owner wrote.
type TimingReport struct {
	// Own is this manager's timing; Row the owner's (zero: the row
	// carries none).
	Own, Row RowTiming
	// RowOwner is the identity of the row's owner.
	RowOwner string
	// Wait is how long this manager waits on an unchanged revision of
	// that owner's row before taking it over: the longer of both
	// lease_ttl values.
	Wait time.Duration
}

// Step is the core's answer: an Op to perform now, or the instant at which
// Tick should be called next, and the events produced.
type Step struct {
	Op     Op
	WakeAt time.Duration
	Events []Event
}

// State is the core's role.
type State uint8

// Roles.
const (
	StateStandby   State = iota // polling the row
	StateOwner                  // holding the row, serving until the deadline
	StateReleasing              // release call in flight
	StateStopped                // released; does nothing more
)

type purpose uint8

const (
	pNone purpose = iota
	pAcqRead
	pAcqCAS
	pRenew
	pAuthRead
	pRelease
	pReleaseRead
)

// Core is the lease protocol as a pure state machine. It never reads a
// clock and starts nothing: the caller passes the current instant of a
// monotonic clock (one that counts suspend) to Tick, Done and Release,
// performs the Op a Step asks for, and reports its Result with Done. At
// most one Op is outstanding at a time. A Core is not safe for concurrent
// use.
type Core struct {
	cfg    Config
	id     Identity
	key    string
	rnd    *rand.Rand
	mut    mutation  // empty unless built with -tags leasemutants
	timing RowTiming // written into every row this core writes

	state   State
	pending purpose
	sentAt  time.Duration // when the pending Op was issued
	callEnd time.Duration // deadline shared by the ops of one Acquire

	// Standby.
	haveBase    bool
	baseRev     int64
	baseAt      time.Duration
	baseWait    time.Duration // takeover threshold for baseRev
	rowTiming   RowTiming     // last owner timing reported
	rowReported bool          // rowTiming was reported
	mismatch    bool          // the last report was a mismatch
	observed    time.Duration // Observed of the takeover CAS in flight
	took        Row           // the row the takeover CAS in flight replaces
	acqEpoch    uint64        // epoch the takeover CAS in flight writes
	maxEpoch    uint64        // highest epoch seen in the row
	nextAcquire time.Duration
	// unknownCAS: the last takeover CAS failed with an error other than
	// a conflict (a timeout), so it may have landed; unknownSent and
	// unknownEpoch are its send instant and the epoch it wrote. The next
	// Acquire read resolves it (adoptLanded).
	unknownCAS   bool
	unknownSent  time.Duration
	unknownEpoch uint64

	// Owner.
	rev        int64
	epoch      uint64
	okSent     time.Duration // send instant of the last renew known to have landed
	deadline   time.Duration
	streak     int
	ambig      bool          // a renew may have landed unacknowledged
	ambigSince time.Duration // send instant of the first such renew
	nextRenew  time.Duration

	holdUntil      time.Duration // no new term, no release before this
	releaseWanted  bool
	releaseRetried bool
	// neverWritten: the caller knows no call of this identity wrote the
	// row before this core (ReleaseNeverWritten); casSent: this core sent
	// one. With the first and not the second the row is not ours.
	neverWritten, casSent bool

	// fed: a RowSource reads the row for this core (Feed); the core
	// never issues its own Acquire read.
	fed bool
	// batched: a Renewer renews this owner in batches (RenewNow), before
	// the core's own renew timer, which then waits the longest admitted
	// delay.
	batched bool

	// deferOn: this standby is not the desired taker of a row owned by
	// deferOwner ("" for a free row) and waits TakeoverDeferral longer.
	deferOn    bool
	deferOwner string
	// lastHolder is the owner of the last held row this core read.
	lastHolder string
}

// NewCore returns a standby core for key that will poll first at now. rnd
// draws the poll and renew jitter; a seeded source makes the core
// deterministic.
func NewCore(cfg Config, id Identity, key string, rnd *rand.Rand, now time.Duration) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if id.Owner == "" {
		return nil, fmt.Errorf("%w: empty owner identity for key %q", ErrInvalidConfig, key)
	}
	if rnd == nil {
		return nil, fmt.Errorf("%w: nil random source", ErrInvalidConfig)
	}
	return &Core{cfg: cfg, id: id, key: key, rnd: rnd, nextAcquire: now, timing: cfg.RowTiming()}, nil
}

// State reports the core's role.
func (c *Core) State() State { return c.state }

// Owner reports the current ownership term's epoch and self-fence
// deadline; ok is false unless the core is owner.
func (c *Core) Owner() (epoch uint64, deadline time.Duration, ok bool) {
	if c.state != StateOwner {
		return 0, 0, false
	}
	return c.epoch, c.deadline, true
}

// SetFed switches the standby's Acquire read to Feed: the core stops
// reading its row itself and acts on the bulk reads it is handed instead.
// Every other call (compare-and-swap, renew, authoritative read, release)
// it still issues itself.
func (c *Core) SetFed(on bool) { c.fed = on }

// SetBatched says whether a Renewer renews this core's row in batches
// (RenewNow). The core's own renew timer stays as the upper bound and
// waits renew_interval + lease_renew_jitter/2 after a renew round ends,
// the longest delay admission's self-fence inequality allows: the
// renewer's ticks, no further apart than that, come first, so the core
// renews alone only when a batch missed it. Renewing earlier than the
// timer is always safe, and admission's arithmetic is unchanged.
func (c *Core) SetBatched(on bool) { c.batched = on }

// RenewNow issues an owner's renew now, ahead of its timer, for a
// Renewer's batch, and reports whether it did: only an owner with no call
// outstanding and no release asked for renews. Otherwise it is Tick.
// The renew is an Op like any other; its Result's Sent is when the batch
// call began.
func (c *Core) RenewNow(now time.Duration) (Step, bool) {
	var s Step
	c.fenceCheck(now, &s)
	renew := c.state == StateOwner && c.pending == pNone && !c.releaseWanted
	if renew {
		c.issue(now, pRenew, Op{Kind: OpCAS, Expect: c.rev, Row: c.myRow(c.epoch), Deadline: now + c.cfg.RenewCallTimeout}, &s)
	}
	c.next(now, &s)
	return s, renew
}

// Defer tells a standby whether it is the desired taker of a row owned
// by owner ("" for a free row: missing or released). With on, it takes
// such a row only Config.TakeoverDeferral later than it otherwise would:
// after lease_ttl plus the deferral on an unchanged revision of owner's
// row, or the deferral after it first saw the row free. A row owner
// released in a planned handover or an orderly stop (release cause
// handover) right after this core saw it held counts as owner's too; a
// release for a lost path does not, as its budget holds no deferral. Its
// own row is never deferred. A deferral only ever delays a takeover, so it
// cannot make two owners; admission adds it to the owner-death budget.
func (c *Core) Defer(owner string, on bool) { c.deferOwner, c.deferOn = owner, on }

// deferred reports whether the takeover of row waits the deferral.
func (c *Core) deferred(row Row) bool {
	switch {
	case !c.deferOn || c.cfg.TakeoverDeferral <= 0 || row.Owner == c.id.Owner:
		return false
	case row.Owner != "" || c.deferOwner == "":
		return row.Owner == c.deferOwner
	}
	return c.lastHolder == c.deferOwner && row.Release != nil && row.Release.Cause == ReleaseCauseHandover
}

// WantsFeed reports whether Feed would act now: a fed standby with no
// call outstanding and no release asked for.
func (c *Core) WantsFeed() bool {
	return c.fed && c.state == StateStandby && c.pending == pNone && !c.releaseWanted
}

// Feed hands a fed standby the outcome of a read of its row that a
// RowSource made for many rows at once: sent is when that read was sent,
// r its row, version or error, and now an instant after its response
// arrived. It is the Acquire read: a new revision's baseline is now, and a
// takeover's compare-and-swap shares one renew_call_timeout with the read,
// counted from sent. A core that is not waiting for a feed (WantsFeed is
// false, or a fenced term's post-fence hold has not passed) ignores it.
func (c *Core) Feed(now, sent time.Duration, r Result) Step {
	var s Step
	c.fenceCheck(now, &s)
	if c.WantsFeed() && now >= c.holdUntil {
		c.callEnd = sent + c.cfg.RenewCallTimeout
		c.onAcquireRead(now, r, &s)
	}
	c.next(now, &s)
	return s
}

// Tick advances the core to now: it fences an owner whose deadline has
// passed and issues the call that is due.
func (c *Core) Tick(now time.Duration) Step {
	var s Step
	c.fenceCheck(now, &s)
	c.next(now, &s)
	return s
}

// Release asks the core to give the row up. The caller must already have
// closed everything opened as owner. The release call is issued at once
// or when the outstanding call completes; EventReleased follows its
// outcome and the core stops.
func (c *Core) Release(now time.Duration) Step {
	c.releaseWanted = true
	c.unknownCAS = false // a release reads the row and releases it if ours
	return c.Tick(now)
}

// ReleaseNeverWritten is Release for a core whose identity never sent a
// call that could write the row before this core: a standby that sent
// none either stops at once, since the row cannot be its own, rather
// than reading it first (a read an unreachable store would fail, for a
// release that has nothing to give up).
func (c *Core) ReleaseNeverWritten(now time.Duration) Step {
	c.neverWritten = true
	return c.Release(now)
}

// PollNow moves a standby's next poll to now (or to the end of its hold
// after a fenced term) and advances the core like Tick.
func (c *Core) PollNow(now time.Duration) Step {
	if c.state == StateStandby && c.pending == pNone && !c.releaseWanted {
		c.nextAcquire = min(c.nextAcquire, max(now, c.holdUntil))
	}
	return c.Tick(now)
}

// Done reports the outcome of the outstanding Op at now.
func (c *Core) Done(now time.Duration, r Result) Step {
	var s Step
	p := c.pending
	if p == pNone {
		panic("lease: Core.Done without an outstanding op")
	}
	c.pending = pNone
	sent := max(c.sentAt, r.Sent)
	c.fenceCheck(now, &s)

	switch p {
	case pAcqRead:
		c.onAcquireRead(now, r, &s)
	case pAcqCAS:
		c.unknownCAS = false
		if r.Err == nil {
			c.becomeOwner(now, sent, r.Version, &s)
		} else {
			// A conflict is contention; any other error may have landed,
			// which the next Acquire finds as our own row with this
			// epoch (adoptLanded).
			if !errors.Is(r.Err, ErrConflict) && !c.releaseWanted {
				c.unknownCAS, c.unknownSent, c.unknownEpoch = true, sent, c.acqEpoch
			}
			c.endAcquire(now)
		}
	case pRenew:
		c.onRenew(now, sent, r, &s)
	case pAuthRead:
		c.onAuthRead(now, r, &s)
	case pRelease:
		if errors.Is(r.Err, ErrConflict) && !c.releaseRetried {
			// Perhaps a renew whose response was lost moved the row:
			// find out, and release the version that is ours.
			c.releaseRetried = true
			c.issue(now, pReleaseRead, Op{Kind: OpAuthRead, Deadline: now + c.cfg.RenewCallTimeout}, &s)
			break
		}
		c.stop(now, r.Err, &s)
	case pReleaseRead:
		if r.Err == nil && r.Row.Owner == c.id.Owner {
			// Ours: a term we fenced, a takeover whose response was lost,
			// or a renew that moved the row.
			c.state, c.rev, c.epoch = StateReleasing, r.Version, r.Row.Epoch
			c.issue(now, pRelease, Op{Kind: OpRelease, Expect: c.rev, Row: Row{Epoch: c.epoch}, Deadline: now + c.cfg.RenewCallTimeout}, &s)
			break
		}
		err := r.Err
		if err == nil && c.state == StateReleasing {
			err = fmt.Errorf("%w: release of key %q: the row is no longer ours (owner %q, epoch %d)", ErrConflict, c.key, r.Row.Owner, r.Row.Epoch)
		}
		c.stop(now, err, &s)
	}
	c.next(now, &s)
	return s
}

func (c *Core) stop(now time.Duration, err error, s *Step) {
	c.state = StateStopped
	s.Events = append(s.Events, Event{Kind: EventReleased, Epoch: c.epoch, At: now, Err: err})
}

func (c *Core) fenceCheck(now time.Duration, s *Step) {
	if c.state == StateOwner && now >= c.deadline {
		s.Events = append(s.Events, Event{Kind: EventFenced, Epoch: c.epoch, At: now})
		c.toStandby(now)
	}
}

// toStandby ends an ownership term. The row may still be ours, and the
// next Acquire reclaims it without waiting for lease_ttl; but not before
// the ended term's transports have surely closed, which takes no longer
// than lease_ttl - FenceAfter (the close bound and clock margin) after the
// owner context ended. Otherwise one process could hold two connections.
func (c *Core) toStandby(now time.Duration) {
	ended := min(now, c.deadline)
	c.state = StateStandby
	c.haveBase = false
	c.ambig = false
	c.streak = 0
	c.holdUntil = c.mutHold(now, ended+c.cfg.LeaseTTL-c.cfg.FenceAfter)
	c.nextAcquire = max(now, c.holdUntil)
}

// next issues the due call or computes the wake-up instant.
func (c *Core) next(now time.Duration, s *Step) {
	if c.pending != pNone {
		// Either the op just issued, or one still outstanding: only the
		// fence deadline can be due meanwhile.
		s.WakeAt = Never
		if c.state == StateOwner {
			s.WakeAt = c.deadline
		}
		return
	}
	s.Op, s.WakeAt = Op{}, Never
	switch c.state {
	case StateStandby:
		if c.releaseWanted {
			// The row may still be ours (a fenced term, a takeover whose
			// response was lost): look, and release it if so. A fenced
			// term's transports may still be closing; wait that out.
			if now < c.holdUntil {
				s.WakeAt = c.holdUntil
				return
			}
			if c.neverWritten && !c.casSent {
				c.stop(now, nil, s)
				return
			}
			c.releaseRetried = true
			c.issue(now, pReleaseRead, Op{Kind: OpAuthRead, Deadline: now + c.cfg.RenewCallTimeout}, s)
			return
		}
		if c.fed {
			return // the next Feed is the next Acquire
		}
		if now < c.nextAcquire {
			s.WakeAt = c.nextAcquire
			return
		}
		c.callEnd = now + c.cfg.RenewCallTimeout
		c.issue(now, pAcqRead, Op{Kind: OpRead}, s)
	case StateOwner:
		if c.releaseWanted {
			c.state = StateReleasing
			c.issue(now, pRelease, Op{Kind: OpRelease, Expect: c.rev, Row: Row{Epoch: c.epoch}, Deadline: now + c.cfg.RenewCallTimeout}, s)
			return
		}
		if now < c.nextRenew {
			s.WakeAt = min(c.nextRenew, c.deadline)
			return
		}
		c.issue(now, pRenew, Op{Kind: OpCAS, Expect: c.rev, Row: c.myRow(c.epoch), Deadline: now + c.cfg.RenewCallTimeout}, s)
	}
}

func (c *Core) issue(now time.Duration, p purpose, op Op, s *Step) {
	if op.Kind == OpRead || (p == pAcqCAS) {
		op.Deadline = c.callEnd
	}
	op.Key = c.key
	c.casSent = c.casSent || op.Kind == OpCAS
	c.pending, c.sentAt = p, now
	s.Op = op
}

func (c *Core) myRow(epoch uint64) Row {
	return Row{Owner: c.id.Owner, Node: c.id.Node, Epoch: epoch, Timing: c.timing}
}

// setBase starts the wait on a revision of another owner's row.
func (c *Core) setBase(now time.Duration, row Row, ver int64, s *Step) {
	c.haveBase, c.baseRev, c.baseAt = true, ver, now
	c.baseWait = c.takeoverWait(row.Timing)
	c.noteTiming(now, row, s)
}

// takeoverWait is how long a revision must stay unchanged before this
// standby takes it over: the longer of its own lease_ttl and the one the
// row's owner wrote. The owner is closed L_owner - clock_rate_margin after
// its last landed renew on its own clock, which is no later than L_owner
// on this one (docs/lease-protocol.md). A row without timing (an older
// binary) is judged by this node's own lease_ttl.
func (c *Core) takeoverWait(t RowTiming) time.Duration {
	return c.mutWait(max(c.cfg.LeaseTTL, t.LeaseTTL))
}

// noteTiming reports a change of the timing other owners' rows carry.
func (c *Core) noteTiming(now time.Duration, row Row, s *Step) {
	if row.Owner == "" || row.Owner == c.id.Owner || (c.rowReported && row.Timing == c.rowTiming) {
		return
	}
	c.rowTiming, c.rowReported = row.Timing, true
	differs := row.Timing != c.timing
	if !differs && !c.mismatch {
		return
	}
	kind := EventTimingMismatch
	if !differs {
		kind = EventTimingMatch
	}
	c.mismatch = differs
	s.Events = append(s.Events, Event{Kind: kind, Epoch: row.Epoch, At: now, Timing: TimingReport{
		Own: c.timing, Row: row.Timing, RowOwner: row.Owner, Wait: c.takeoverWait(row.Timing)}})
}

func (c *Core) onAcquireRead(now time.Duration, r Result, s *Step) {
	if c.state != StateStandby {
		return
	}
	if r.Err != nil {
		c.endAcquire(now)
		return
	}
	row, ver := r.Row, r.Version
	c.maxEpoch = max(c.maxEpoch, row.Epoch)
	if c.adoptLanded(now, r, s) {
		return
	}
	free := ver == 0 || row.Owner == "" || row.Owner == c.id.Owner
	wait := time.Duration(0)
	if c.deferred(row) {
		wait = c.cfg.TakeoverDeferral
	}
	if row.Owner != "" {
		c.lastHolder = row.Owner
	}
	switch {
	case free && wait == 0:
		// Missing, released, or ours (a takeover whose response was lost,
		// or a term we fenced): take it in this same call.
		c.observed = now
	case !c.haveBase || ver != c.baseRev:
		// A new revision: the holder is alive at least until it was
		// written; start the wait after this response. A free row waits
		// only the deferral.
		c.setBase(now, row, ver, s)
		if free {
			c.baseWait = 0
		}
		c.endAcquire(now)
		return
	case now-c.baseAt >= c.baseWait+wait:
		c.observed = c.baseAt
	default:
		c.endAcquire(now)
		return
	}
	if now >= c.callEnd {
		c.endAcquire(now)
		return
	}
	// The highest epoch seen, not just this row's: a row deleted by hand
	// must not send the fencing token backwards.
	c.acqEpoch = c.maxEpoch + 1
	// Re-taking our own row (a lost response, a slow takeover) keeps the
	// row the first takeover replaced: that is where the outage began.
	if row.Owner != c.id.Owner || c.took == (Row{}) {
		c.took = row
	}
	c.issue(now, pAcqCAS, Op{Kind: OpCAS, Expect: ver, Row: c.myRow(c.acqEpoch)}, s)
}

// adoptLanded resolves a takeover CAS whose outcome was unknown with the
// Acquire read r, and reports whether the core became owner from it. A
// row of this core's own identity with exactly that CAS's epoch is that
// CAS, landed: only this process writes this identity, and every other
// write of it (a renew of an earlier term) carries an earlier epoch, as
// each takeover writes one above the highest seen. Another CAS there
// would land too, move the row again and, with the store's round trip
// between half and one renew_call_timeout, time out again: the row would
// never stay unchanged for the lease_ttl a standby waits, and no one
// would serve (lab: the drop after a fence). Instead the core becomes
// owner, its fence deadline anchored at the CAS's send, as a renew's is:
// the row landed no earlier than that send, so any standby's lease_ttl
// wait on that revision starts after it (docs/lease-protocol.md). A
// fenced term's hold was over before that CAS was issued. Past its fence
// deadline becomeOwner refuses, and the row gets a fresh take. Anything
// else (another epoch or owner, an error) ends the unknown and takes the
// usual path.
func (c *Core) adoptLanded(now time.Duration, r Result, s *Step) bool {
	if !c.unknownCAS || r.Err != nil {
		return false
	}
	c.unknownCAS = false
	if r.Version == 0 || r.Row.Owner != c.id.Owner || r.Row.Epoch != c.unknownEpoch {
		return false
	}
	// observed and took stay as the original take set them: the outage
	// began there.
	c.acqEpoch = r.Row.Epoch
	c.becomeOwner(now, c.unknownSent, r.Version, s)
	return c.state == StateOwner
}

// endAcquire schedules the next Acquire after a jittered poll wait.
func (c *Core) endAcquire(now time.Duration) {
	lo := admission.MinJitteredPoll(c.cfg.AcquirePollInterval)
	hi, _ := admission.PollBoundary(c.cfg.AcquirePollInterval) // validated
	c.nextAcquire = now + lo + time.Duration(c.rnd.Int64N(int64(hi-lo)+1))
}

func (c *Core) renewDelay() time.Duration {
	half := c.cfg.RenewJitter / 2
	if c.batched {
		return c.cfg.RenewInterval + half
	}
	return c.cfg.RenewInterval - half + time.Duration(c.rnd.Int64N(int64(2*half)+1))
}

func (c *Core) fenceFrom(sent, now time.Duration) time.Duration {
	return c.mutFence(now, sent+c.cfg.FenceAfter)
}

func (c *Core) becomeOwner(now, sent time.Duration, ver int64, s *Step) {
	if c.state != StateStandby {
		return
	}
	deadline := c.fenceFrom(sent, now)
	if now >= deadline {
		// The call outlived the fence interval (a pause): serving would
		// already be unsafe. The row is ours; reclaim it with a fresh call.
		c.nextAcquire = now
		return
	}
	c.state = StateOwner
	c.rev, c.epoch = ver, c.acqEpoch
	c.okSent, c.deadline = sent, deadline
	c.streak, c.ambig = 0, false
	c.nextRenew = now + c.renewDelay()
	if !c.releaseWanted {
		s.Events = append(s.Events, Event{Kind: EventBecameOwner, Epoch: c.epoch, At: now, Observed: c.observed, Took: c.took})
	}
	// The row is ours now, and carries our timing.
	if c.mismatch {
		s.Events = append(s.Events, Event{Kind: EventTimingMatch, Epoch: c.epoch, At: now, Timing: TimingReport{
			Own: c.timing, Row: c.timing, RowOwner: c.id.Owner, Wait: c.cfg.LeaseTTL}})
	}
	c.mismatch, c.rowReported = false, false
}

func (c *Core) onRenew(now, sent time.Duration, r Result, s *Step) {
	if c.state != StateOwner {
		return
	}
	if r.Err == nil {
		c.rev = r.Version
		c.okSent, c.deadline = sent, c.fenceFrom(sent, now)
		c.streak, c.ambig = 0, false
		c.nextRenew = now + c.renewDelay()
		return
	}
	c.streak++
	conflict := errors.Is(r.Err, ErrConflict)
	if !conflict && !c.ambig {
		c.ambig, c.ambigSince = true, sent
	}
	if conflict || c.streak >= c.cfg.MaxRenewFails {
		c.issue(now, pAuthRead, Op{Kind: OpAuthRead, Deadline: now + c.cfg.RenewCallTimeout}, s)
		return
	}
	c.nextRenew = now + c.renewDelay()
}

func (c *Core) onAuthRead(now time.Duration, r Result, s *Step) {
	if c.state != StateOwner {
		return
	}
	switch {
	case r.Err != nil:
	case r.Row.Owner == c.id.Owner && r.Row.Epoch == c.epoch:
		if r.Version != c.rev {
			// Only this process writes this identity: one of the renews
			// sent since ambigSince landed. Adopt its revision; it was
			// sent no earlier than ambigSince.
			c.rev = r.Version
			if c.ambig && !c.mut.on() && c.ambigSince > c.okSent {
				c.okSent, c.deadline = c.ambigSince, c.ambigSince+c.cfg.FenceAfter
			}
			c.ambig, c.streak = false, 0
		}
	default:
		s.Events = append(s.Events, Event{Kind: EventLost, Epoch: c.epoch, At: now})
		c.toStandby(now)
		hold := c.nextAcquire
		c.setBase(now, r.Row, r.Version, s)
		c.endAcquire(now)
		c.nextAcquire = max(c.nextAcquire, hold)
		return
	}
	c.nextRenew = now + c.renewDelay()
}
