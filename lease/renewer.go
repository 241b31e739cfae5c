package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// RenewerOptions configure a Renewer.
type RenewerOptions struct {
	// Store renews the rows: the Store the managers use.
	Store BatchSwapper
	// Clock is the managers' clock; nil means Now. It must be the clock
	// of every Manager that uses the renewer.
	Clock func() time.Duration
	// Rand draws the tick jitter; nil seeds one from crypto/rand.
	Rand *rand.Rand
}

// Renewer renews every row the managers of a process own in batches: one
// CompareAndSwapBatch per tick for all of them instead of one
// compare-and-swap per session (docs/lease-protocol.md, "Renew in
// batches"). Every owner Manager given the renewer (Options.Renewer) is
// asked at each tick to issue its renew at once (Core.RenewNow); the
// renews its managers hand in are sent together, each comparing its own
// row's version, and each core is handed its own row's outcome, anchored
// at the instant the batch call began. Owners with different
// renew_interval, lease_renew_jitter or renew_call_timeout tick in
// separate groups. Ticks come uniformly within TickRange, a little
// before a core's own renew timer (Core.SetBatched), which stays as the
// upper bound. Safe for concurrent use.
type Renewer struct {
	o     RenewerOptions
	clock func() time.Duration
	calls atomic.Int64
	rows  atomic.Int64
	ticks atomic.Int64

	mu     sync.Mutex
	rnd    *rand.Rand
	groups map[renewCadence]*renewGroup
}

// renewCadence is what an owner's renew schedule depends on.
type renewCadence struct{ interval, jitter, call time.Duration }

type renewGroup struct {
	ren  *Renewer
	cad  renewCadence
	subs map[*renewSub]struct{} // guarded by ren.mu
	// asked are the subscribers asked this tick that have not answered;
	// queue the renews handed in and not yet sent. Both guarded by ren.mu.
	asked map[*renewSub]struct{}
	queue []renewReq
	kick  chan struct{} // an answer, a renew or a close arrived (cap 1)
}

// renewSub is one manager's subscription.
type renewSub struct {
	g     *renewGroup
	ask   chan struct{} // renew now (cap 1)
	res   chan Result   // the outcome of the renew handed in (cap 1)
	owned atomic.Bool
}

type renewReq struct {
	sub *renewSub
	op  Op
}

// NewRenewer returns a renewer that writes through o.Store.
func NewRenewer(o RenewerOptions) (*Renewer, error) {
	if o.Store == nil {
		return nil, fmt.Errorf("%w: nil store for renewer", ErrInvalidConfig)
	}
	clock, rnd := clockAndRand(o.Clock, o.Rand)
	return &Renewer{o: o, clock: clock, rnd: rnd, groups: map[renewCadence]*renewGroup{}}, nil
}

// Calls reports how many batch calls the renewer has made.
func (r *Renewer) Calls() int64 { return r.calls.Load() }

// Ticks reports how many ticks asked at least one owner to renew: the
// renew rounds of the renewer's owners.
func (r *Renewer) Ticks() int64 { return r.ticks.Load() }

// Renews reports how many renews the renewer has sent in its batches.
func (r *Renewer) Renews() int64 { return r.rows.Load() }

// subscribe registers a manager of cadence cfg; the group's tick loop
// runs while it has subscribers.
func (r *Renewer) subscribe(cfg Config) *renewSub {
	cad := renewCadence{interval: cfg.RenewInterval, jitter: cfg.RenewJitter, call: cfg.RenewCallTimeout}
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[cad]
	if g == nil {
		g = &renewGroup{ren: r, cad: cad, subs: map[*renewSub]struct{}{}, asked: map[*renewSub]struct{}{}, kick: make(chan struct{}, 1)}
		r.groups[cad] = g
		go g.run()
	}
	sub := &renewSub{g: g, ask: make(chan struct{}, 1), res: make(chan Result, 1)}
	g.subs[sub] = struct{}{}
	return sub
}

// close ends the subscription; the last one stops the group's loop.
func (sub *renewSub) close() {
	r := sub.g.ren
	r.mu.Lock()
	delete(sub.g.subs, sub)
	delete(sub.g.asked, sub)
	if len(sub.g.subs) == 0 {
		delete(r.groups, sub.g.cad)
	}
	r.mu.Unlock()
	sub.g.poke()
}

// skip answers a tick without a renew: the core is not an owner, or has a
// call outstanding.
func (sub *renewSub) skip() {
	r := sub.g.ren
	r.mu.Lock()
	delete(sub.g.asked, sub)
	r.mu.Unlock()
	sub.g.poke()
}

// renew hands op (the core's renew) to the next batch and waits for its
// outcome. A renew handed in between ticks (its manager was busy when
// asked) is sent at once.
func (sub *renewSub) renew(ctx context.Context, op Op) Result {
	r := sub.g.ren
	select {
	case <-sub.res: // an outcome nobody waited for (a cancelled wait)
	default:
	}
	r.mu.Lock()
	delete(sub.g.asked, sub)
	sub.g.queue = append(sub.g.queue, renewReq{sub: sub, op: op})
	r.mu.Unlock()
	sub.g.poke()
	select {
	case res := <-sub.res:
		return res
	case <-ctx.Done():
		return Result{Err: fmt.Errorf("lease renew of key %q in a batch: %w", op.Key, ctx.Err())}
	}
}

func (g *renewGroup) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// live reports whether the group still has subscribers.
func (g *renewGroup) live() bool {
	g.ren.mu.Lock()
	defer g.ren.mu.Unlock()
	return g.ren.groups[g.cad] == g
}

// run is the group's tick loop: wait a jittered renew_interval, sending
// any renew handed in meanwhile at once; then ask every owner to renew,
// wait for their answers (at most collectWait), and send the batch.
func (g *renewGroup) run() {
	for g.live() {
		t := time.NewTimer(g.tickWait())
		for waiting := true; waiting; {
			select {
			case <-t.C:
				waiting = false
			case <-g.kick:
				if !g.live() {
					t.Stop()
					return
				}
				g.flush()
			}
		}
		g.tick()
	}
}

// tick asks every owner to renew now and sends their renews in one batch
// once every asked manager answered or collectWait passed. A manager that
// answers later (busy in a call of its own) is sent alone when it does.
func (g *renewGroup) tick() {
	g.ren.mu.Lock()
	for sub := range g.subs {
		if !sub.owned.Load() {
			continue
		}
		select {
		case sub.ask <- struct{}{}:
			g.asked[sub] = struct{}{}
		default: // an earlier ask is still unread
		}
	}
	if len(g.asked) > 0 {
		g.ren.ticks.Add(1)
	}
	g.ren.mu.Unlock()
	t := time.NewTimer(g.collectWait())
	defer t.Stop()
	for g.answering() {
		select {
		case <-t.C:
			g.flush()
			return
		case <-g.kick:
		}
	}
	g.flush()
}

// answering reports whether an asked manager has not answered yet.
func (g *renewGroup) answering() bool {
	g.ren.mu.Lock()
	defer g.ren.mu.Unlock()
	return len(g.asked) > 0
}

// collectWait bounds how long a tick waits for the managers' answers:
// every renew's call bound runs from its issue, so the wait comes out of
// the first renew's renew_call_timeout.
func (g *renewGroup) collectWait() time.Duration { return collectWait(g.cad.call) }

func collectWait(call time.Duration) time.Duration { return min(call/4, 50*time.Millisecond) }

// TickRange is the range a Renewer draws the wait between its ticks from,
// for owners of cfg: renew_interval ± lease_renew_jitter/2, moved earlier
// by twice the wait for the owners' answers (min(renew_call_timeout/4,
// 50ms)), so that a tick has asked and collected its owners' renews
// before their own timers fire, renew_interval + lease_renew_jitter/2
// after their last round, even when the process is slow to run it. It
// never starts below half of renew_interval - lease_renew_jitter/2.
func TickRange(cfg Config) (lo, hi time.Duration) {
	half := cfg.RenewJitter / 2
	early := 2 * collectWait(cfg.RenewCallTimeout)
	lo = max(cfg.RenewInterval-half-early, (cfg.RenewInterval-half)/2)
	return lo, max(cfg.RenewInterval+half-early, lo)
}

// tickWait draws the wait between ticks, uniform in TickRange.
func (g *renewGroup) tickWait() time.Duration {
	lo, hi := TickRange(Config{RenewInterval: g.cad.interval, RenewJitter: g.cad.jitter, RenewCallTimeout: g.cad.call})
	g.ren.mu.Lock()
	defer g.ren.mu.Unlock()
	return lo + time.Duration(g.ren.rnd.Int64N(int64(hi-lo)+1))
}

// flush sends the renews handed in as one CompareAndSwapBatch, bounded by
// the earliest of their deadlines, and hands each its outcome with the
// instant the call began.
func (g *renewGroup) flush() {
	r := g.ren
	r.mu.Lock()
	reqs := g.queue
	g.queue = nil
	for sub := range g.asked {
		// Not answered in time: withdraw the ask, so that the manager
		// does not renew again right after its own call.
		select {
		case <-sub.ask:
		default:
		}
	}
	clear(g.asked)
	r.mu.Unlock()
	if len(reqs) == 0 {
		return
	}
	sent := r.clock()
	end := reqs[0].op.Deadline
	swaps := make([]Swap, len(reqs))
	for i, q := range reqs {
		end = min(end, q.op.Deadline)
		swaps[i] = Swap{Key: q.op.Key, Expect: q.op.Expect, Row: q.op.Row}
	}
	r.calls.Add(1)
	r.rows.Add(int64(len(reqs)))
	var res []Result
	err := context.DeadlineExceeded
	if d := end - sent; d > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		res, err = r.o.Store.CompareAndSwapBatch(ctx, swaps)
		cancel()
	}
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("%w: %d results for %d renews", ErrUnavailable, len(res), len(reqs))
	}
	for i, q := range reqs {
		var out Result
		if err != nil {
			out.Err = fmt.Errorf("lease renew of key %q in a batch of %d: %w", q.op.Key, len(reqs), err)
		} else {
			out = res[i]
		}
		out.Sent = sent
		select {
		case q.sub.res <- out:
		default: // its manager stopped waiting and stopped
		}
	}
}
