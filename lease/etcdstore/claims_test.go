package etcdstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
)

// claimTTL is the claims' etcd lease; etcd raises anything shorter than
// its own minimum (1.5 times the election timeout) to that minimum.
const claimTTL = 2 * time.Second

// claimer is one bridge process's store under its own key_prefix.
func claimer(t *testing.T, c *testetcd.Cluster, prefix string) *etcdstore.Store {
	t.Helper()
	st, err := etcdstore.New(context.Background(), etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second,
		KeyPrefix: prefix, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// rawClaim reads a claim row with a client of its own, as an operator
// would with etcdctl; ok is false when the row is absent.
func rawClaim(t *testing.T, cli *clientv3.Client, endpoint string) (lease.Claim, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, etcdstore.ClaimKey(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return lease.Claim{}, false
	}
	var c lease.Claim
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		t.Fatal(err)
	}
	return c, true
}

func TestClaimsAcrossKeyPrefixes(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	const press, mixer = "modbus_tcp://10.0.0.5:502", "modbus_rtu:/dev/ttyUSB0 on gw-1"
	plantA := lease.Claim{KeyPrefix: "/plant-a/", Session: "press", Node: "a1", Owner: "a1-x"}
	plantB := lease.Claim{KeyPrefix: "/plant-b/", Session: "press", Node: "b1", Owner: "b1-y"}

	a := claimer(t, c, plantA.KeyPrefix)
	releaseA, err := a.Claim(ctx, []string{press}, plantA, claimTTL)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := rawClaim(t, cli, press); !ok || got != plantA {
		t.Fatalf("row at %s: %+v %v, want %+v", etcdstore.ClaimKey(press), got, ok, plantA)
	}

	// Another key_prefix is refused, all or nothing: the free endpoint
	// claimed in the same call is not written either.
	b := claimer(t, c, plantB.KeyPrefix)
	_, err = b.Claim(ctx, []string{mixer, press}, plantB, claimTTL)
	var conflict *lease.ClaimConflict
	if !errors.As(err, &conflict) || !errors.Is(err, lease.ErrClaimed) || conflict.Endpoint != press || conflict.Holder != plantA {
		t.Fatalf("plant-b claim: %v, want a conflict with %+v on %s", err, plantA, press)
	}
	if _, ok := rawClaim(t, cli, mixer); ok {
		t.Errorf("a refused claim wrote %s", mixer)
	}
	// So is another session of the same key_prefix.
	other := plantA
	other.Session = "press-2"
	if _, err := b.Claim(ctx, []string{press}, other, claimTTL); !errors.As(err, &conflict) {
		t.Errorf("another session: %v, want a conflict", err)
	}

	// The next owner of the same session takes the row over while the
	// previous owner's claim is live; the previous owner's release then
	// leaves it in place.
	next := plantA
	next.Node, next.Owner = "a2", "a2-z"
	a2 := claimer(t, c, plantA.KeyPrefix)
	releaseA2, err := a2.Claim(ctx, []string{press}, next, claimTTL)
	if err != nil {
		t.Fatalf("takeover within the session: %v", err)
	}
	if err := releaseA(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := rawClaim(t, cli, press); !ok || got != next {
		t.Fatalf("after the previous owner's release: %+v %v, want %+v", got, ok, next)
	}
	if err := releaseA2(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := rawClaim(t, cli, press); ok {
		t.Fatal("a released claim is still there")
	}

	// Released, the endpoint is plant-b's.
	releaseB, err := b.Claim(ctx, []string{mixer, press}, plantB, claimTTL)
	if err != nil {
		t.Fatalf("plant-b after release: %v", err)
	}
	defer func() { _ = releaseB(ctx) }()
	if got, _ := rawClaim(t, cli, mixer); got != plantB {
		t.Errorf("row of %s: %+v", mixer, got)
	}
}

// A process that dies holding claims stops keeping them alive; etcd
// deletes them when their lease lapses, and the other fleet may claim.
func TestClaimLapsesWhenTheProcessDies(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	ctx := context.Background()
	const ep = "opc.tcp://line3:4840/ua"
	dead := claimer(t, c, "/plant-a/")
	if _, err := dead.Claim(ctx, []string{ep}, lease.Claim{KeyPrefix: "/plant-a/", Session: "line3", Node: "a1", Owner: "a1-x"}, claimTTL); err != nil {
		t.Fatal(err)
	}
	b := claimer(t, c, "/plant-b/")
	mine := lease.Claim{KeyPrefix: "/plant-b/", Session: "line3", Node: "b1", Owner: "b1-y"}
	// Kept alive, the claim outlives its TTL.
	for start := time.Now(); time.Since(start) < 2*claimTTL; {
		if _, err := b.Claim(ctx, []string{ep}, mine, claimTTL); !errors.Is(err, lease.ErrClaimed) {
			t.Fatalf("%s after the claim: %v, want ErrClaimed while it is kept alive", time.Since(start), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = dead.Close()
	died := time.Now()
	deadline := time.Now().Add(time.Minute) // a test timeout, not a bound asserted
	for {
		release, err := b.Claim(ctx, []string{ep}, mine, claimTTL)
		if err == nil {
			_ = release(ctx)
			t.Logf("claim lapsed %s after its process died (ttl %s)", time.Since(died), claimTTL)
			return
		}
		if !errors.Is(err, lease.ErrClaimed) || time.Now().After(deadline) {
			t.Fatalf("%s after the holder died: %v", time.Since(died), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A claim with TakesOver takes a live claim of its session over only from
// that owner: a handover's target claiming ahead never overwrites the
// claim of an owner that took the row first.
func TestClaimTakesOverOnlyTheNamedOwner(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	ctx := context.Background()
	const ep = "modbus_tcp://10.0.0.9:502"
	old := lease.Claim{KeyPrefix: "/p/", Session: "press", Node: "a", Owner: "a-1"}
	a := claimer(t, c, old.KeyPrefix)
	if _, err := a.Claim(ctx, []string{ep}, old, claimTTL); err != nil {
		t.Fatal(err)
	}
	b := claimer(t, c, old.KeyPrefix)
	ahead := lease.Claim{KeyPrefix: "/p/", Session: "press", Node: "b", Owner: "b-1", TakesOver: "c-1"}
	var conflict *lease.ClaimConflict
	if _, err := b.Claim(ctx, []string{ep}, ahead, claimTTL); !errors.As(err, &conflict) || conflict.Holder != old {
		t.Fatalf("claim ahead from c-1 over a-1's claim: %v, want a conflict", err)
	}
	ahead.TakesOver = "a-1"
	release, err := b.Claim(ctx, []string{ep}, ahead, claimTTL)
	if err != nil {
		t.Fatalf("claim ahead from a-1: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	stored := ahead
	stored.TakesOver = ""
	if got, ok := rawClaim(t, cli, ep); !ok || got != stored {
		t.Fatalf("row %+v %v, want %+v (TakesOver is not stored)", got, ok, stored)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := rawClaim(t, cli, ep); ok {
		t.Fatal("a released claim is still there")
	}
}

// The claims share one kept-alive etcd lease; when it is gone (the store
// did not hear from the process for its TTL), the next claim grants a new
// one instead of failing.
func TestClaimAfterItsLeaseLapsed(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st := claimer(t, c, "/p/")
	mine := lease.Claim{KeyPrefix: "/p/", Session: "press", Node: "a", Owner: "a-1"}
	const first, second = "modbus_tcp://10.0.0.1:502", "modbus_tcp://10.0.0.2:502"
	if _, err := st.Claim(ctx, []string{first}, mine, claimTTL); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, etcdstore.ClaimKey(first))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("claim row %+v, %v: want one attached to a lease", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if _, ok := rawClaim(t, cli, first); ok {
		t.Fatal("the revoked lease's claim is still there")
	}
	mine.Session = "mixer"
	release, err := st.Claim(ctx, []string{second}, mine, claimTTL)
	if err != nil {
		t.Fatalf("claim after the lease lapsed: %v", err)
	}
	if got, ok := rawClaim(t, cli, second); !ok || got != mine {
		t.Fatalf("row %+v %v, want %+v", got, ok, mine)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
}
