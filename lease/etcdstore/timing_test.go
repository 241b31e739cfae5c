package etcdstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
)

// rawClient reads and writes rows as etcdctl would, bypassing the store.
func rawClient(t *testing.T, c *testetcd.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// mixedTiming: the owner runs twice the standby's lease_ttl. Its row
// carries its timing (raw JSON, integer nanoseconds); the standby reports
// the mismatch once, waits the owner's lease_ttl after the owner's last
// renew, not its own, and reports the match once it owns the row.
func mixedTiming(t *testing.T, c *testetcd.Cluster, short budgets) {
	long := timing
	long.LeaseTTL = 2 * timing.LeaseTTL
	lb := admitTiming(t, long)
	a := startNode(t, c, lb, t.Name(), "a", nil)
	a.wait(lease.EventBecameOwner, startWait)
	o := a.m.Owner()

	resp, err := rawClient(t, c).Get(context.Background(), "/leasebridge/test/"+t.Name())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw read of the row: %v %v", resp, err)
	}
	var raw struct {
		Timing map[string]int64 `json:"timing"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"lease_ttl_ns": int64(long.LeaseTTL), "renew_interval_ns": int64(long.RenewInterval),
		"renew_call_timeout_ns": int64(long.RenewCallTimeout), "acquire_poll_interval_ns": int64(long.AcquirePollInterval),
		"fence_after_ns": int64(lb.cfg.FenceAfter)}
	if fmt.Sprint(raw.Timing) != fmt.Sprint(want) {
		t.Fatalf("row %s: timing %v, want %v", resp.Kvs[0].Value, raw.Timing, want)
	}

	s := startNode(t, c, short, t.Name(), "b", nil)
	mm := s.wait(lease.EventTimingMismatch, startWait)
	if mm.Timing.Row != lb.cfg.RowTiming() || mm.Timing.Own != short.cfg.RowTiming() || mm.Timing.Wait != long.LeaseTTL {
		t.Fatalf("mismatch event %+v, want row %+v own %+v wait %v", mm.Timing, lb.cfg.RowTiming(), short.cfg.RowTiming(), long.LeaseTTL)
	}
	time.Sleep(3 * timing.RenewInterval) // b polls several renewed revisions
	killedAt := a.kill()
	lastRenewSent := o.Deadline() - lb.cfg.FenceAfter
	mixed, err := admission.OwnerDeath(admission.Timing{LeaseTTL: max(long.LeaseTTL, timing.LeaseTTL),
		AcquirePollInterval: timing.AcquirePollInterval, RenewCallTimeout: timing.RenewCallTimeout}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := s.wait(lease.EventBecameOwner, 2*mixed.Total)
	// One clock here: a takeover before the owner's lease_ttl since its
	// last renew was sent would break the fence proof.
	if early := lastRenewSent + long.LeaseTTL - ev.At; early > 0 {
		t.Fatalf("takeover %v before the owner's lease_ttl %v had passed since its last renew", early, long.LeaseTTL)
	}
	if took := ev.At - killedAt; took > mixed.Total {
		t.Fatalf("takeover %v after the kill, over the mixed-fleet owner-death budget %v", took, mixed.Total)
	}
	s.wait(lease.EventTimingMatch, time.Second)
	if n := s.count(lease.EventTimingMismatch); n != 1 {
		t.Fatalf("%d mismatch events for one owner timing, want 1: %v", n, s.history())
	}
	t.Logf("owner lease_ttl %v, standby %v: takeover %v after the kill (mixed budget %v)", long.LeaseTTL, timing.LeaseTTL, ev.At-killedAt, mixed.Total)
}

// rowWithoutTiming: a row written by an older binary (no timing field) is
// judged by the standby's own lease_ttl and reported as a mismatch.
func rowWithoutTiming(t *testing.T, c *testetcd.Cluster, b budgets) {
	key := "/leasebridge/test/" + t.Name()
	if _, err := rawClient(t, c).Put(context.Background(), key, `{"owner":"old#1","node":"old","epoch":7}`); err != nil {
		t.Fatal(err)
	}
	s := startNode(t, c, b, t.Name(), "b", nil)
	mm := s.wait(lease.EventTimingMismatch, startWait)
	if mm.Timing.Row != (lease.RowTiming{}) || mm.Timing.Wait != timing.LeaseTTL || mm.Timing.RowOwner != "old#1" {
		t.Fatalf("mismatch event %+v for a row without timing", mm.Timing)
	}
	ev := s.wait(lease.EventBecameOwner, 2*b.ownerDeath)
	if ev.Epoch != 8 || ev.At-ev.Observed < timing.LeaseTTL {
		t.Fatalf("took the old row at epoch %d, %v after observing it; want epoch 8, >= lease_ttl %v", ev.Epoch, ev.At-ev.Observed, timing.LeaseTTL)
	}
}
