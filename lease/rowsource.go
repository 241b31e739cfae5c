package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// RowSourceOptions configure a RowSource.
type RowSourceOptions struct {
	// Store reads the rows: the Store the managers use.
	Store PrefixReader
	// Prefix is the part of the session ids every subscribed key starts
	// with; "" reads every row of the store's key prefix.
	Prefix string
	// Clock is the managers' clock; nil means Now. It must be the clock
	// of every Manager that uses the source.
	Clock func() time.Duration
	// Rand draws the poll jitter; nil seeds one from crypto/rand.
	Rand *rand.Rand
}

// RowSource makes the Acquire reads of a process's standbys in bulk: one
// linearizable ReadPrefix per poll for all of them instead of one Read per
// session. Every standby Manager given the source (Options.Rows) is fed
// its row and version from that read; takeovers are still one
// compare-and-swap per session, on the revision its own standby observed
// (docs/lease-protocol.md, "The calls"). Standbys with different
// acquire_poll_interval or renew_call_timeout poll in separate groups,
// each at its own cadence. It reads only while some standby waits for a
// row, so a process that owns every session makes no reads. Safe for
// concurrent use.
type RowSource struct {
	o     RowSourceOptions
	clock func() time.Duration
	reads atomic.Int64

	mu     sync.Mutex
	rnd    *rand.Rand
	groups map[cadence]*rowGroup
}

// cadence is what a standby's Acquire reads depend on.
type cadence struct{ poll, call time.Duration }

type rowGroup struct {
	src  *RowSource
	cad  cadence
	subs map[*rowSub]struct{} // guarded by src.mu
	wake chan struct{}        // a subscriber started waiting (cap 1)
	soon chan struct{}        // read without waiting out the poll (cap 1)
}

// rowSub is one manager's subscription.
type rowSub struct {
	g    *rowGroup
	key  string
	ch   chan rowFeed // the latest undelivered feed (cap 1)
	want atomic.Bool
}

// rowFeed is one bulk read's outcome for one key: sent is when the read
// was sent, on the source's clock.
type rowFeed struct {
	sent time.Duration
	r    Result
}

// NewRowSource returns a source that reads through o.Store.
func NewRowSource(o RowSourceOptions) (*RowSource, error) {
	if o.Store == nil {
		return nil, fmt.Errorf("%w: nil store for row source of prefix %q", ErrInvalidConfig, o.Prefix)
	}
	clock, rnd := clockAndRand(o.Clock, o.Rand)
	return &RowSource{o: o, clock: clock, rnd: rnd, groups: map[cadence]*rowGroup{}}, nil
}

// Reads reports how many bulk reads the source has sent.
func (s *RowSource) Reads() int64 { return s.reads.Load() }

// subscribe registers key; the group's poll loop runs while it has
// subscribers.
// NewManager has checked that key is under the source's prefix.
func (s *RowSource) subscribe(key string, cfg Config) *rowSub {
	cad := cadence{poll: cfg.AcquirePollInterval, call: cfg.RenewCallTimeout}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[cad]
	if g == nil {
		g = &rowGroup{src: s, cad: cad, subs: map[*rowSub]struct{}{}, wake: make(chan struct{}, 1), soon: make(chan struct{}, 1)}
		s.groups[cad] = g
		go g.run()
	}
	sub := &rowSub{g: g, key: key, ch: make(chan rowFeed, 1)}
	g.subs[sub] = struct{}{}
	g.hurry()
	return sub
}

// close ends the subscription; the last one stops the group's loop.
func (sub *rowSub) close() {
	s := sub.g.src
	s.mu.Lock()
	delete(sub.g.subs, sub)
	if len(sub.g.subs) == 0 {
		delete(s.groups, sub.g.cad)
	}
	s.mu.Unlock()
	sub.g.poke()
}

// setWant says whether the manager waits for its row; a change to true
// starts a read at once if the group's loop is idle.
func (sub *rowSub) setWant(on bool) {
	if sub.want.Swap(on) != on && on {
		sub.g.poke()
	}
}

// ReadSoon makes every group read at once rather than at the end of its
// poll, e.g. when a release is expected: its standbys see it without
// waiting a poll. Reading more often than the poll never makes a takeover
// less safe.
func (s *RowSource) ReadSoon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		g.hurry()
	}
}

// hurry cuts the group's current poll wait short.
func (g *rowGroup) hurry() {
	select {
	case g.soon <- struct{}{}:
	default:
	}
}

func (g *rowGroup) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// waiting returns the subscribers that want a row, or ok false once the
// group has none left.
func (g *rowGroup) waiting() (subs []*rowSub, ok bool) {
	g.src.mu.Lock()
	defer g.src.mu.Unlock()
	if g.src.groups[g.cad] != g {
		return nil, false
	}
	for sub := range g.subs {
		if sub.want.Load() {
			subs = append(subs, sub)
		}
	}
	return subs, true
}

// run is the group's poll loop: a read whenever a subscriber waits, then
// the jittered acquire_poll_interval a standby's own Acquire would wait,
// cut short when a manager subscribes: a newly started standby reads at
// once, as one reading its own row does. Reading more often than the poll
// only makes a takeover sooner.
func (g *rowGroup) run() {
	for {
		subs, ok := g.waiting()
		if !ok {
			return
		}
		if len(subs) == 0 {
			select {
			case <-g.wake:
			case <-g.soon:
			}
			continue
		}
		select {
		case <-g.soon: // the round below serves it
		default:
		}
		g.round()
		t := time.NewTimer(g.pollWait())
		select {
		case <-t.C:
		case <-g.soon:
			t.Stop()
		}
	}
}

// round makes one bulk read, bounded by renew_call_timeout, and hands
// each waiting subscriber its row. Subscribers that started waiting while
// the read was in flight get it too: a read only has to reflect every
// write that landed before its response, and the baseline each standby
// takes is later still.
func (g *rowGroup) round() {
	s := g.src
	sent := s.clock()
	s.reads.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), g.cad.call)
	rows, err := s.o.Store.ReadPrefix(ctx, s.o.Prefix)
	cancel()
	subs, _ := g.waiting()
	for _, sub := range subs {
		f := rowFeed{sent: sent}
		switch rv, found := rows[sub.key]; {
		case err != nil:
			f.r.Err = err
		case found:
			f.r = rv
		}
		select {
		case <-sub.ch: // replace an undelivered older feed
		default:
		}
		sub.ch <- f
	}
}

// pollWait draws the wait after a read, as Core does after an Acquire:
// uniform in [MinJitteredPoll(P), PollBoundary(P)].
func (g *rowGroup) pollWait() time.Duration {
	lo := admission.MinJitteredPoll(g.cad.poll)
	hi, _ := admission.PollBoundary(g.cad.poll) // validated by the managers' Config
	g.src.mu.Lock()
	defer g.src.mu.Unlock()
	return lo + time.Duration(g.src.rnd.Int64N(int64(hi-lo)+1))
}
