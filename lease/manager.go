package lease

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Manager.
type Options struct {
	// Store holds the lease rows.
	Store Store
	// Key is the session id; the store maps it to its row.
	Key string
	// Identity is this process's identity, normally NewIdentity(node).
	Identity Identity
	// Config is the session's admitted cadence.
	Config Config
	// OnEvent receives every event, in order, on the run loop's goroutine.
	// It must not block: a slow handler delays renewals.
	OnEvent func(Event)
	// OnRenewFailure, when set, is told of every renew call that failed or
	// timed out (the write may still have landed), on the run loop's
	// goroutine; like OnEvent it must not block.
	OnRenewFailure func(error)
	// Rand draws the jitter; nil seeds one from crypto/rand.
	Rand *rand.Rand
	// Clock is the monotonic clock; nil means Now.
	Clock func() time.Duration
	// Wrote, when set, is shared by every manager of this Key and
	// Identity in the process: the manager sets it before it sends a call
	// that may write the row (a takeover). While it is unset the row
	// cannot be this identity's, so a release stops at once without the
	// authoritative read a lost takeover response needs, which an
	// unreachable store would fail. Nil: every release reads first.
	Wrote *atomic.Bool
	// Rows, when set, makes this manager's Acquire reads as a standby in
	// bulk with the process's other standbys: one store read per poll for
	// all of them. Nil: the manager reads its own row at every poll.
	Rows *RowSource
	// Renewer, when set, renews this manager's row as owner in batches
	// with the process's other owners: a few store calls per renew round
	// for all of them. Nil: the manager renews its own row alone.
	Renewer *Renewer
}

// Manager runs one session's lease: it polls as a standby, takes the row
// over, renews it as owner and fences itself. Create it with NewManager,
// then call Run once.
type Manager struct {
	o       Options
	clock   func() time.Duration
	core    *Core
	release chan chan error
	poke    chan struct{}
	offer   chan VersionedRow // the latest row offered (cap 1)
	// note is written into the released row (ReleaseWith).
	note atomic.Pointer[Release]
	// deferral is the latest Defer, handed to the core by the run loop.
	deferral atomic.Pointer[deferral]
	done     chan struct{}
	started  atomic.Bool

	mu    sync.Mutex
	owner *Owner
}

// clockAndRand fills in the defaults of Options' and RowSourceOptions'
// Clock and Rand: Now, and a generator seeded from crypto/rand.
func clockAndRand(clock func() time.Duration, rnd *rand.Rand) (func() time.Duration, *rand.Rand) {
	if clock == nil {
		clock = Now
	}
	if rnd == nil {
		var b [16]byte
		_, _ = crand.Read(b[:])
		rnd = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])))
	}
	return clock, rnd
}

// NewManager validates o and returns a standby manager.
func NewManager(o Options) (*Manager, error) {
	if o.Store == nil {
		return nil, fmt.Errorf("%w: nil store for key %q", ErrInvalidConfig, o.Key)
	}
	if o.Key == "" {
		return nil, fmt.Errorf("%w: empty key", ErrInvalidConfig)
	}
	clock, rnd := clockAndRand(o.Clock, o.Rand)
	core, err := NewCore(o.Config, o.Identity, o.Key, rnd, clock())
	if err != nil {
		return nil, err
	}
	if o.Rows != nil {
		if !strings.HasPrefix(o.Key, o.Rows.o.Prefix) {
			return nil, fmt.Errorf("%w: key %q is outside the row source's prefix %q", ErrInvalidConfig, o.Key, o.Rows.o.Prefix)
		}
		core.SetFed(true)
	}
	core.SetBatched(o.Renewer != nil)
	return &Manager{o: o, clock: clock, core: core, release: make(chan chan error), poke: make(chan struct{}, 1), offer: make(chan VersionedRow, 1), done: make(chan struct{})}, nil
}

// Owner returns the current owner handle, or nil while not owner.
func (m *Manager) Owner() *Owner {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owner
}

// Run drives the lease until ctx ends (returning ctx's error, without
// releasing: standbys take over after lease_ttl) or until Release
// completes (returning nil). Ending it cancels the owner context.
//
// Between calls the loop sleeps until the core's next instant (a renew,
// the fence deadline, a poll), until a RowSource hands it its row, until
// a Renewer asks it to renew, or until the process's clock watcher
// reports a resume from suspend.
func (m *Manager) Run(ctx context.Context) error {
	if m.started.Swap(true) {
		return fmt.Errorf("%w: Run called twice for key %q", ErrInvalidConfig, m.o.Key)
	}
	defer close(m.done)
	var l loop
	if m.o.Rows != nil {
		l.sub = m.o.Rows.subscribe(m.o.Key, m.o.Config)
		defer l.sub.close()
		l.feed = l.sub.ch
	}
	if m.o.Renewer != nil {
		l.ren = m.o.Renewer.subscribe(m.o.Config)
		defer l.ren.close()
		l.ask = l.ren.ask
	}
	l.timer = time.NewTimer(time.Hour)
	defer l.timer.Stop()
	step := m.core.Tick(m.clock())
	for {
		if d := m.deferral.Load(); d != nil {
			m.core.Defer(d.owner, d.on)
		}
		m.apply(ctx, step, &l.reply)
		if m.core.State() == StateStopped {
			return nil
		}
		if step.Op.Kind != OpNone {
			var err error
			if step, err = m.perform(ctx, step.Op, &l); err != nil {
				return err
			}
			continue
		}
		if l.sub != nil {
			l.sub.setWant(m.core.WantsFeed())
		}
		if l.ren != nil {
			l.ren.owned.Store(m.core.State() == StateOwner)
		}
		var err error
		if step, err = m.await(ctx, step, &l); err != nil {
			return err
		}
	}
}

// loop is the state of one Run.
type loop struct {
	timer *time.Timer
	reply chan error
	feed  <-chan rowFeed
	sub   *rowSub
	ask   <-chan struct{}
	ren   *renewSub
	// batch: the Op the core issued is its renew for the renewer's batch.
	batch bool
}

// await sleeps until the next thing to do and returns the core's step
// for it; an error when ctx ended.
func (m *Manager) await(ctx context.Context, step Step, l *loop) (Step, error) {
	var wake <-chan time.Time
	if step.WakeAt != Never {
		l.timer.Reset(max(step.WakeAt-m.clock(), 0))
		wake = l.timer.C
	}
	defer l.timer.Stop()
	select {
	case <-ctx.Done():
		m.endOwner(ErrStopped)
		return Step{}, ctx.Err()
	case <-wake:
		return m.core.Tick(m.clock()), nil
	case <-resumed():
		return m.core.Tick(m.clock()), nil
	case f := <-l.feed:
		l.sub.setWant(false)
		return m.core.Feed(m.clock(), f.sent, f.r), nil
	case <-l.ask:
		step, l.batch = m.core.RenewNow(m.clock())
		if !l.batch {
			l.ren.skip()
		}
		return step, nil
	case <-m.poke:
		step = m.core.PollNow(m.clock())
		if m.o.Rows != nil {
			// A fed standby's next Acquire is the row source's next
			// bulk read: ask for it now.
			m.o.Rows.ReadSoon()
		}
		return step, nil
	case r := <-m.offer:
		if l.sub != nil {
			l.sub.setWant(false)
		}
		now := m.clock()
		return m.core.Feed(now, now, Result{Row: r.Row, Version: r.Version}), nil
	case l.reply = <-m.release:
		m.endOwner(ErrReleased)
		if m.o.Wrote != nil && !m.o.Wrote.Load() {
			return m.core.ReleaseNeverWritten(m.clock()), nil
		}
		return m.core.Release(m.clock()), nil
	}
}

// perform makes the store call op and hands its result to the core.
func (m *Manager) perform(ctx context.Context, op Op, l *loop) (Step, error) {
	// An owner's compare-and-swap is its renew.
	renew := op.Kind == OpCAS && m.core.State() == StateOwner
	if op.Kind == OpCAS && m.o.Wrote != nil {
		m.o.Wrote.Store(true)
	}
	var r Result
	if l.batch {
		l.batch = false
		r = l.ren.renew(ctx, op)
	} else {
		r = m.call(ctx, op)
	}
	if ctx.Err() != nil {
		m.endOwner(ErrStopped)
		return Step{}, ctx.Err()
	}
	if renew && r.Err != nil && m.o.OnRenewFailure != nil {
		m.o.OnRenewFailure(r.Err)
	}
	return m.core.Done(m.clock(), r), nil
}

// Release cancels the owner context, gives the row up and stops the
// manager. Close everything opened under the owner context before calling
// it: a standby may take the row as soon as the release lands. It returns
// the release call's error (nil if the manager owned nothing).
func (m *Manager) Release(ctx context.Context) error {
	return m.ReleaseWith(ctx, nil)
}

// ReleaseWith is Release writing why into the released row, for the
// successor's FailureToFullDuration; why nil says nothing.
func (m *Manager) ReleaseWith(ctx context.Context, why *Release) error {
	if why != nil {
		m.note.Store(why)
	}
	reply := make(chan error, 1)
	select {
	case m.release <- reply:
	case <-m.done:
		return fmt.Errorf("release of key %q: %w", m.o.Key, ErrStopped)
	case <-ctx.Done():
		return fmt.Errorf("release of key %q: %w", m.o.Key, ctx.Err())
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("release of key %q: %w", m.o.Key, ctx.Err())
	}
}

// Poke makes a standby poll the row now rather than at its next poll: a
// planned handover's target calls it when the row is released. It never
// blocks and is a no-op for an owner; polling early is always safe, as a
// takeover still waits for a revision to stay unchanged for lease_ttl.
func (m *Manager) Poke() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// deferral is one Defer call.
type deferral struct {
	owner string
	on    bool
}

// Defer tells the standby whether it is the desired taker of its row
// while owner holds it ("" for a free row); see Core.Defer. Safe from any
// goroutine; the run loop applies it before its next step.
func (m *Manager) Defer(owner string, on bool) {
	m.deferral.Store(&deferral{owner: owner, on: on})
}

// Offer hands a standby its row as a watch delivered it, to be used as
// the Acquire read it would otherwise make: a planned handover's target
// offers the released row and takes it in one compare-and-swap. It never
// blocks (a newer offer replaces an unread one). Only a standby fed by a
// RowSource (Options.Rows) waiting for its row uses it; an owner or a
// standby that reads for itself ignores it, so its caller pokes too. An
// offered row is never less safe than a read: a takeover still compares
// against its version, and a live owner's row still has to stay
// unchanged for lease_ttl.
func (m *Manager) Offer(r VersionedRow) {
	for {
		select {
		case m.offer <- r:
			return
		default:
		}
		select {
		case <-m.offer:
		default:
		}
	}
}

func (m *Manager) apply(ctx context.Context, s Step, reply *chan error) {
	for _, ev := range s.Events {
		switch ev.Kind {
		case EventBecameOwner:
			o := newOwner(ctx, ev.Epoch, m.clock)
			_, dl, _ := m.core.Owner()
			o.deadline.Store(int64(dl))
			o.startWatch()
			m.mu.Lock()
			m.owner = o
			m.mu.Unlock()
			ev.Owner = o
		case EventFenced:
			m.endOwner(ErrFenced)
		case EventLost:
			m.endOwner(ErrLost)
		case EventReleased:
			if *reply != nil {
				*reply <- ev.Err
				*reply = nil
			}
		}
		if m.o.OnEvent != nil {
			m.o.OnEvent(ev)
		}
	}
	if _, dl, ok := m.core.Owner(); ok {
		if o := m.Owner(); o != nil && o.deadline.Swap(int64(dl)) > int64(dl) {
			o.watch() // an earlier deadline than the watchdog's timer
		}
	}
}

func (m *Manager) endOwner(cause error) {
	m.mu.Lock()
	o := m.owner
	m.owner = nil
	m.mu.Unlock()
	if o != nil {
		o.cancel(cause)
	}
}

// call performs op, bounded by its deadline.
func (m *Manager) call(ctx context.Context, op Op) Result {
	d := op.Deadline - m.clock()
	if d <= 0 {
		return Result{Err: fmt.Errorf("lease %s of key %q: %w", op.Kind, op.Key, context.DeadlineExceeded)}
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var r Result
	st := m.o.Store
	switch op.Kind {
	case OpRead:
		r.Row, r.Version, r.Err = st.Read(cctx, op.Key)
	case OpAuthRead:
		r.Row, r.Version, r.Err = st.ReadAuthoritative(cctx, op.Key)
	case OpCAS:
		r.Version, r.Err = st.CompareAndSwap(cctx, op.Key, op.Expect, op.Row)
	case OpRelease:
		row := op.Row
		row.Release = m.note.Load()
		r.Err = st.Release(cctx, op.Key, op.Expect, row)
	}
	return r
}

// Owner is one ownership term. Everything opened as owner must be opened
// under Context, and Valid must be checked before any device I/O that
// follows a pause: a frozen or suspended process may resume past its
// deadline before the watchdog has cancelled the context.
type Owner struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	epoch    uint64
	deadline atomic.Int64
	clock    func() time.Duration

	wmu   sync.Mutex
	timer *time.Timer // the fence watchdog
}

func newOwner(parent context.Context, epoch uint64, clock func() time.Duration) *Owner {
	ctx, cancel := context.WithCancelCause(parent)
	return &Owner{ctx: ctx, cancel: cancel, epoch: epoch, clock: clock}
}

// Context is cancelled at the self-fence deadline, on loss, on release and
// when the manager stops; context.Cause names which.
func (o *Owner) Context() context.Context { return o.ctx }

// Epoch is the term's fencing token.
func (o *Owner) Epoch() uint64 { return o.epoch }

// Deadline is the current self-fence deadline on the manager's clock
// (Now); each successful renew moves it later.
func (o *Owner) Deadline() time.Duration { return time.Duration(o.deadline.Load()) }

// Valid reports whether the term may still do device I/O: the context is
// live and the deadline has not passed on the manager's clock.
func (o *Owner) Valid() bool {
	return o.ctx.Err() == nil && o.clock() < o.Deadline()
}

// startWatch arms the fence watchdog and registers the term with the
// process's clock watcher, which re-checks it after a suspend.
func (o *Owner) startWatch() {
	watchOwner(o)
	context.AfterFunc(o.ctx, func() {
		unwatchOwner(o)
		o.wmu.Lock()
		defer o.wmu.Unlock()
		if o.timer != nil {
			o.timer.Stop()
		}
	})
	o.watch()
}

// watch cancels the context at the deadline, re-reading it as renewals
// move it: one timer per term, firing at the deadline it last read. Go's
// timers stop during suspend; the clock watcher calls watch after a
// resume, so a deadline that passed meanwhile is acted on then.
func (o *Owner) watch() {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if o.ctx.Err() != nil {
		return
	}
	left := o.Deadline() - o.clock()
	if left <= 0 {
		o.cancel(ErrFenced)
		return
	}
	if o.timer == nil {
		o.timer = time.AfterFunc(left, o.watch)
		return
	}
	o.timer.Reset(left)
}
