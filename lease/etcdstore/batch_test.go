package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
)

func newStore(t *testing.T, c *testetcd.Cluster, maxTxnOps int) *etcdstore.Store {
	t.Helper()
	st, err := etcdstore.New(context.Background(), etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second,
		KeyPrefix: "/leasebridge/batch/", CallTimeout: 5 * time.Second, MaxTxnOps: maxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// putRows writes n rows and returns their keys and versions.
func putRows(t *testing.T, st *etcdstore.Store, n int) ([]lease.Swap, []int64) {
	t.Helper()
	swaps := make([]lease.Swap, n)
	vers := make([]int64, n)
	for i := range swaps {
		row := lease.Row{Owner: "n1#a", Node: "n1", Epoch: 1}
		v, err := st.CompareAndSwap(context.Background(), fmt.Sprintf("s%03d", i), 0, row)
		if err != nil {
			t.Fatal(err)
		}
		swaps[i], vers[i] = lease.Swap{Key: fmt.Sprintf("s%03d", i), Expect: v, Row: row}, v
	}
	return swaps, vers
}

// 300 rows in ceil(300/127) Txns: each row on its own compare, one taken
// by another writer refused alone, every other row at its Txn's revision.
func TestBatchEachRowOnItsOwnCompare(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	st := newStore(t, c, 0)
	swaps, _ := putRows(t, st, 300)
	taken := 123
	if _, err := st.CompareAndSwap(context.Background(), swaps[taken].Key, swaps[taken].Expect, lease.Row{Owner: "n2#b", Node: "n2", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	txns0 := st.Txns()
	res, err := st.CompareAndSwapBatch(context.Background(), swaps)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Txns()-txns0, int64((300+etcdstore.DefaultMaxTxnOps-2)/(etcdstore.DefaultMaxTxnOps-1)); got != want {
		t.Fatalf("%d Txns for 300 rows, want %d (max-txn-ops %d)", got, want, etcdstore.DefaultMaxTxnOps)
	}
	for i, r := range res {
		if i == taken {
			if !errors.Is(r.Err, lease.ErrConflict) {
				t.Fatalf("the taken row: %+v, want a conflict", r)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("row %d: %v", i, r.Err)
		}
		row, ver, err := st.Read(context.Background(), swaps[i].Key)
		if err != nil || ver != r.Version || row.Owner != "n1#a" {
			t.Fatalf("row %d reads %+v at %d (%v), want the batch's version %d", i, row, ver, err, r.Version)
		}
	}
	if row, _, _ := st.Read(context.Background(), swaps[taken].Key); row.Owner != "n2#b" {
		t.Fatalf("the taken row was overwritten: %+v", row)
	}
}

// A server with a lower --max-txn-ops refuses the first Txn as too large:
// the store sends it again in halves, every row lands, and the next batch
// uses the size that passed, without a refusal.
func TestBatchHalvesWhenTheServerRefuses(t *testing.T) {
	c := testetcd.StartEmbeddedWith(t, 1, func(cfg *embed.Config) { cfg.MaxTxnOps = 16 })
	st := newStore(t, c, 0) // assumes etcd's default, 128
	swaps, _ := putRows(t, st, 100)
	txns0 := st.Txns()
	res, err := st.CompareAndSwapBatch(context.Background(), swaps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("row %d: %v", i, r.Err)
		}
		swaps[i].Expect = r.Version
	}
	first := st.Txns() - txns0
	txns0 = st.Txns()
	if res, err = st.CompareAndSwapBatch(context.Background(), swaps); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("second batch, row %d: %v", i, r.Err)
		}
	}
	second := st.Txns() - txns0
	// Halving 100 passes at 12 rows (100, 50, 25 refused): 9 Txns, the
	// most 15 rows a Txn can carry would need 7.
	if second != 9 || first <= second {
		t.Fatalf("Txns: %d for the first batch, %d for the second; want 9 for the second and more for the first", first, second)
	}
	t.Logf("max-txn-ops 16: %d Txns for the first batch of 100 (halving), %d for the second", first, second)
}

// Managers renewing through a Renewer on etcd: 200 owned rows cost
// ceil(200/127) Txns per renew round, no owner fences, and a row taken
// inside a batch is lost at once while the others stay owned.
func TestBatchedRenewalsOnEtcd(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	b := admit(t)
	st := newStore(t, c, 0)
	ren, err := lease.NewRenewer(lease.RenewerOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	lost := make(chan string, n)
	var mu sync.Mutex
	owned := map[string]bool{}
	lastErr := map[string]error{} // each key's last renew failure
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		key := fmt.Sprintf("s%03d", i)
		m, err := lease.NewManager(lease.Options{Store: st, Key: key, Identity: lease.NewIdentity("n1"), Config: b.cfg, Renewer: ren,
			OnRenewFailure: func(err error) { mu.Lock(); lastErr[key] = err; mu.Unlock() },
			OnEvent: func(ev lease.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch ev.Kind {
				case lease.EventBecameOwner:
					owned[key] = true
				case lease.EventFenced:
					t.Errorf("%s fenced", key)
				case lease.EventLost:
					owned[key] = false
					lost <- key
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = m.Run(ctx) })
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, o := range owned {
			if o {
				k++
			}
		}
		return k
	}
	waitUntil(t, startWait, func() bool { return count() == n })
	calls0, txns0, start := ren.Calls(), st.Txns(), time.Now()
	waitUntil(t, 30*time.Second, func() bool { return ren.Calls()-calls0 >= 10 })
	calls, txns := ren.Calls()-calls0, st.Txns()-txns0
	rounds := float64(time.Since(start)) / float64(b.cfg.RenewInterval)
	t.Logf("%d owned rows: %d batch calls, %d Txns in %.1f renew rounds", n, calls, txns, rounds)
	if perCall := float64(txns) / float64(calls); perCall > 2.5 {
		t.Fatalf("%.1f Txns per batch call for %d rows, want ceil(%d/127) = 2 (and a late single now and then)", perCall, n, n)
	}

	takeOver(t, st, "s042", "n2#b")
	took := time.Now()
	select {
	case key := <-lost:
		if key != "s042" {
			t.Fatalf("lost %s, not the taken row", key)
		}
	case <-time.After(b.ownerDeath):
		t.Fatal("the taken row was not lost within the owner-death budget")
	}
	// Learned at once: from the conflict of the batch that carried its
	// renew, not from a streak of failures or its fence.
	mu.Lock()
	last := lastErr["s042"]
	mu.Unlock()
	if !errors.Is(last, lease.ErrConflict) {
		t.Fatalf("the taken row was lost after the renew failure %v, want the batch's conflict", last)
	}
	t.Logf("the taken row was lost %v after the takeover, from its batch's conflict", time.Since(took).Round(time.Millisecond))
	if got := count(); got != n-1 {
		t.Fatalf("%d rows owned after one was taken, want %d", got, n-1)
	}
}

// takeOver writes owner into key as another node's takeover would. The
// row's owner keeps renewing meanwhile, and a renew may land between the
// read and the compare-and-swap (a batch is counted in Renewer.Calls as
// it is sent, before it lands): a conflict is that renew, so read again.
func takeOver(t *testing.T, st *etcdstore.Store, key, owner string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		row, ver, err := st.Read(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		row.Owner, row.Epoch = owner, row.Epoch+1
		_, err = st.CompareAndSwap(context.Background(), key, ver, row)
		if err == nil {
			return
		}
		if !errors.Is(err, lease.ErrConflict) || attempt == 10 {
			t.Fatalf("takeover of %s, attempt %d: %v", key, attempt, err)
		}
		t.Logf("takeover of %s, attempt %d: %v (a renew landed in between)", key, attempt, err)
	}
}

// waitUntil polls cond until it holds or limit passes (a test timeout, not
// an asserted budget).
func waitUntil(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
