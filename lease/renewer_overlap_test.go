package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// overlapStore is a MemStore that counts, per key, the writes in flight
// at once, and delays each batch by a seeded random part of its bound, so
// that a renewer's next tick comes late now and then and the cores' own
// renew timers fire between batches.
type overlapStore struct {
	*MemStore
	mu         sync.Mutex
	rnd        *rand.Rand
	maxDelay   time.Duration
	inFlight   map[string]int
	maxOverlap int
	overlapKey string
	singles    int // compare-and-swaps sent alone
}

func (s *overlapStore) enter(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.inFlight[k]++
		if n := s.inFlight[k]; n > s.maxOverlap {
			s.maxOverlap, s.overlapKey = n, k
		}
	}
}

func (s *overlapStore) leave(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.inFlight[k]--
	}
}

// CompareAndSwap implements Store.
func (s *overlapStore) CompareAndSwap(ctx context.Context, key string, expect int64, row Row) (int64, error) {
	s.enter(key)
	defer s.leave(key)
	s.mu.Lock()
	s.singles++
	s.mu.Unlock()
	return s.MemStore.CompareAndSwap(ctx, key, expect, row)
}

// CompareAndSwapBatch implements BatchSwapper.
func (s *overlapStore) CompareAndSwapBatch(ctx context.Context, swaps []Swap) ([]Result, error) {
	keys := make([]string, len(swaps))
	for i, sw := range swaps {
		keys[i] = sw.Key
	}
	s.enter(keys...)
	defer s.leave(keys...)
	s.mu.Lock()
	d := time.Duration(s.rnd.Int64N(int64(s.maxDelay) + 1))
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: batch of %d: %w", ErrUnavailable, len(swaps), ctx.Err())
	case <-t.C:
	}
	return s.MemStore.CompareAndSwapBatch(ctx, swaps)
}

// One node owns every row and nobody else writes them: its batched
// renews and its cores' own timer renews never carry a row twice at
// once, so an owner never meets a conflict on its own row unless an
// earlier renew of it failed otherwise (past its bound on a loaded
// machine), which may have landed unacknowledged.
func TestRenewerNeverOverlapsARow(t *testing.T) {
	cfg := testConfig(t, benchTiming, 20*time.Millisecond)
	st := &overlapStore{MemStore: NewMemStore(), rnd: rand.New(rand.NewPCG(7, 7)), inFlight: map[string]int{},
		// Up to half of what a batch has left after collecting answers.
		maxDelay: (cfg.RenewCallTimeout - collectWait(cfg.RenewCallTimeout)) / 2}
	ren, err := NewRenewer(RenewerOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 20)
	var mu sync.Mutex
	unknown := map[string]int{} // renews of a key that failed otherwise than by a conflict
	var failures, selfConflicts int
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range keys {
		key := fmt.Sprintf("s%02d", i)
		keys[i] = key
		m, err := NewManager(Options{Store: st, Key: key, Identity: Identity{Node: "a", Owner: "a#t"}, Config: cfg, Renewer: ren,
			OnRenewFailure: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				failures++
				switch {
				case !errors.Is(err, ErrConflict):
					unknown[key]++
				case unknown[key] == 0:
					// No earlier renew of this key may have landed
					// unacknowledged: only an overlap explains it.
					selfConflicts++
					t.Errorf("an owner met a conflict on its own row, written by nobody else: %v", err)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = m.Run(ctx) })
	}
	waitFor(t, 10*time.Second, func() bool { return owners(st.MemStore, keys, "a") == len(keys) })
	w0 := st.Writes(keys[0])
	waitFor(t, 20*time.Second, func() bool { return st.Writes(keys[0])-w0 >= 30 })
	cancel()
	wg.Wait()

	st.mu.Lock()
	over, key, singles := st.maxOverlap, st.overlapKey, st.singles
	st.mu.Unlock()
	t.Logf("renewer: %d calls, %d renews; %d compare-and-swaps alone (takeovers and own-timer renews)", ren.Calls(), ren.Renews(), singles)
	if over > 1 {
		t.Errorf("%d writes of %s in flight at once", over, key)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d renew failures, %d conflicts with no unknown renew before them", failures, selfConflicts)
}
