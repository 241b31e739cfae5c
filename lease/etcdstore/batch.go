package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/lease"
)

// DefaultMaxTxnOps is etcd's default --max-txn-ops. etcd counts a nested
// Txn's operations against what its parent leaves: a Txn carrying k nested
// Txns of one compare and one put each passes while 1 <= maxTxnOps - k,
// so a batch carries at most maxTxnOps - 1 rows.
const DefaultMaxTxnOps = 128

var _ lease.BatchSwapper = (*Store)(nil)

// batchRows is how many rows one Txn carries: MaxTxnOps - 1 until the
// server refuses a Txn as too large, then the largest half that passed.
func (s *Store) batchRows() int {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if s.rowsPerTxn == 0 {
		ops := s.maxTxnOps
		if ops <= 1 {
			ops = DefaultMaxTxnOps
		}
		s.rowsPerTxn = ops - 1
	}
	return s.rowsPerTxn
}

// refused lowers the rows per Txn after the server refused n as too many.
func (s *Store) refused(n int) {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if half := max(1, n/2); half < s.rowsPerTxn || s.rowsPerTxn == 0 {
		s.rowsPerTxn = half
	}
}

// CompareAndSwapBatch implements lease.BatchSwapper: one Txn per
// batchRows rows, sent together, each carrying one nested Txn per row
// that compares that row's ModRevision and puts it. Every row written by
// one Txn gets its revision. A Txn the server refuses as too large
// (etcd's --max-txn-ops lower than assumed) is sent again in halves, and
// the store remembers the size that passed. A Txn that fails otherwise
// leaves its rows' outcome unknown: each gets the error.
func (s *Store) CompareAndSwapBatch(ctx context.Context, swaps []lease.Swap) ([]lease.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	out := make([]lease.Result, len(swaps))
	vals := make([]string, len(swaps))
	now := time.Now().UnixNano()
	for i, sw := range swaps {
		row := sw.Row
		row.RenewedAt = now
		b, err := json.Marshal(row)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: encode row for %q: %w", s.prefix+sw.Key, err)
		}
		vals[i] = string(b)
	}
	var wg sync.WaitGroup
	per := s.batchRows()
	for lo := 0; lo < len(swaps); lo += per {
		hi := min(lo+per, len(swaps))
		wg.Go(func() { s.swapTxn(ctx, swaps[lo:hi], vals[lo:hi], out[lo:hi]) })
	}
	wg.Wait()
	return out, nil
}

// swapTxn sends swaps as one Txn and fills out; a Txn refused as too
// large is sent again as two halves, together.
func (s *Store) swapTxn(ctx context.Context, swaps []lease.Swap, vals []string, out []lease.Result) {
	s.txns.Add(1)
	ops := make([]clientv3.Op, len(swaps))
	for i, sw := range swaps {
		k := s.prefix + sw.Key
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", sw.Expect)},
			[]clientv3.Op{clientv3.OpPut(k, vals[i])}, nil)
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil && len(swaps) > 1 && errors.Is(rpctypes.Error(err), rpctypes.ErrTooManyOps) {
		s.refused(len(swaps))
		h := len(swaps) / 2
		var wg sync.WaitGroup
		wg.Go(func() { s.swapTxn(ctx, swaps[:h], vals[:h], out[:h]) })
		s.swapTxn(ctx, swaps[h:], vals[h:], out[h:])
		wg.Wait()
		return
	}
	if err == nil && len(resp.Responses) != len(swaps) {
		err = fmt.Errorf("%d responses for %d rows", len(resp.Responses), len(swaps))
	}
	for i, sw := range swaps {
		k := s.prefix + sw.Key
		switch {
		case err != nil:
			out[i].Err = fmt.Errorf("%w: compare-and-swap %q at revision %d in a batch of %d: %w", lease.ErrUnavailable, k, sw.Expect, len(swaps), err)
		case !resp.Responses[i].GetResponseTxn().GetSucceeded():
			out[i].Err = fmt.Errorf("%w: key %q is no longer at revision %d", lease.ErrConflict, k, sw.Expect)
		default:
			out[i].Version = resp.Header.Revision
		}
	}
}

// Txns reports how many Txn requests CompareAndSwapBatch has sent,
// refused ones included.
func (s *Store) Txns() int64 { return s.txns.Load() }
