package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// MemStore is an in-memory Store for tests and simulations, with knobs to
// inject store faults. Versions come from one counter shared by all keys,
// like etcd's revision.
type MemStore struct {
	mu     sync.Mutex
	rev    int64
	rows   map[string]memRow
	faults Faults
	rnd    *rand.Rand
	writes map[string]int // landed writes per key, for tests
	reads  int            // Read and ReadAuthoritative calls that took effect
	calls  int            // write calls that took effect, a batch counting once
}

type memRow struct {
	row Row
	ver int64
}

// Faults are MemStore's fault knobs. A dropped or partitioned call fails
// only when its context ends, as a real call into a black hole does.
type Faults struct {
	// Latency is added before every call takes effect.
	Latency time.Duration
	// Drop is the probability that a call is lost before it takes effect.
	Drop float64
	// LoseResponse is the probability that a write lands but its
	// response is lost.
	LoseResponse float64
	// Partitioned loses every call.
	Partitioned bool
	// Seed seeds the draws of Drop and LoseResponse.
	Seed uint64
}

// NewMemStore returns an empty, fault-free store.
func NewMemStore() *MemStore {
	return &MemStore{rows: map[string]memRow{}, writes: map[string]int{}, rnd: rand.New(rand.NewPCG(0, 0))}
}

// SetFaults replaces the fault knobs.
func (m *MemStore) SetFaults(f Faults) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = f
	m.rnd = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
}

// Writes reports how many writes landed on key.
func (m *MemStore) Writes(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes[key]
}

// WriteCalls reports how many write calls took effect: a
// CompareAndSwapBatch counts once, whatever its number of rows.
func (m *MemStore) WriteCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// Reads reports how many single-row reads took effect.
func (m *MemStore) Reads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

// Get returns the row at key and its version without faults or context.
func (m *MemStore) Get(key string) (Row, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rows[key]
	return r.row, r.ver
}

// call runs apply under the fault knobs.
func (m *MemStore) call(ctx context.Context, key string, write bool, apply func()) error {
	m.mu.Lock()
	f := m.faults
	drop := f.Partitioned || (f.Drop > 0 && m.rnd.Float64() < f.Drop)
	lose := write && !drop && f.LoseResponse > 0 && m.rnd.Float64() < f.LoseResponse
	m.mu.Unlock()
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: key %q: %w", ErrUnavailable, key, ctx.Err())
		case <-t.C:
		}
	}
	if !drop {
		m.mu.Lock()
		apply()
		if write {
			m.calls++
		}
		m.mu.Unlock()
	}
	if drop || lose {
		<-ctx.Done()
		return fmt.Errorf("%w: key %q: %w", ErrUnavailable, key, ctx.Err())
	}
	return ctx.Err()
}

// Read implements Store.
func (m *MemStore) Read(ctx context.Context, key string) (Row, int64, error) {
	var r memRow
	err := m.call(ctx, key, false, func() { r = m.rows[key]; m.reads++ })
	if err != nil {
		return Row{}, 0, err
	}
	return r.row, r.ver, nil
}

// ReadPrefix implements PrefixReader under the fault knobs, as one call.
func (m *MemStore) ReadPrefix(ctx context.Context, prefix string) (map[string]Result, error) {
	out := map[string]Result{}
	err := m.call(ctx, prefix+"*", false, func() {
		for k, r := range m.rows {
			if strings.HasPrefix(k, prefix) {
				out[k] = Result{Row: r.row, Version: r.ver}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadAuthoritative implements Store; every MemStore read is linearizable.
func (m *MemStore) ReadAuthoritative(ctx context.Context, key string) (Row, int64, error) {
	return m.Read(ctx, key)
}

// CompareAndSwap implements Store.
func (m *MemStore) CompareAndSwap(ctx context.Context, key string, expect int64, row Row) (int64, error) {
	var r Result
	err := m.call(ctx, key, true, func() { r = m.swap(key, expect, row) })
	if err != nil {
		return 0, err
	}
	return r.Version, r.Err
}

// Release implements Store.
func (m *MemStore) Release(ctx context.Context, key string, expect int64, row Row) error {
	row.Owner, row.Node = "", ""
	_, err := m.CompareAndSwap(ctx, key, expect, row)
	return err
}

// CompareAndSwapBatch implements BatchSwapper under the fault knobs, as
// one call: every swap lands or none does, and a lost response loses
// every swap's.
func (m *MemStore) CompareAndSwapBatch(ctx context.Context, swaps []Swap) ([]Result, error) {
	out := make([]Result, len(swaps))
	err := m.call(ctx, fmt.Sprintf("batch of %d", len(swaps)), true, func() {
		for i, sw := range swaps {
			out[i] = m.swap(sw.Key, sw.Expect, sw.Row)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// swap is one compare-and-swap, under m.mu.
func (m *MemStore) swap(key string, expect int64, row Row) Result {
	cur := m.rows[key]
	if cur.ver != expect {
		return Result{Err: fmt.Errorf("%w: key %q at version %d, expected %d", ErrConflict, key, cur.ver, expect)}
	}
	m.rev++
	m.rows[key] = memRow{row: row, ver: m.rev}
	m.writes[key]++
	return Result{Version: m.rev}
}
