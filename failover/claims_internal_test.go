package failover

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// claimRow reads the claim row of endpoint ep: the holder's owner, or ""
// when there is none.
func claimRow(t *testing.T, st *etcdstore.Store, ep string) string {
	t.Helper()
	holder := lease.Claim{KeyPrefix: "/probe/", Session: "probe", Owner: "probe"}
	// A claim of another fleet is refused with the holder named, and
	// writes nothing; one that succeeds means the row was free.
	release, err := st.Claim(context.Background(), []string{ep}, holder, time.Second)
	if err == nil {
		_ = release(context.Background())
		return ""
	}
	var c *lease.ClaimConflict
	if errors.As(err, &c) {
		return c.Holder.Owner
	}
	t.Fatal(err)
	return ""
}

// A handover target's claim ahead takes over only the previous owner's
// claim, is what its activation uses, and is released when it goes
// unused.
func TestClaimAhead(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	ctx := context.Background()
	const plc = "10.0.0.9:502" // not loopback: one claim row for every node
	cfg, err := routes.Parse("b.yaml", []byte(testbin.Config(testbin.Bridge{Etcd: c.Endpoints()[0], Broker: "tcp://127.0.0.1:1883",
		PLC: plc, Node: "node-b", KeyPrefix: "/ahead/", Topic: "t/{tag}"})))
	if err != nil {
		t.Fatal(err)
	}
	store := func() *etcdstore.Store {
		st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, KeyPrefix: "/ahead/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	st, other := store(), store()
	reports, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	rep := reports[0]
	sv := &Supervisor{o: Options{Config: cfg, Claims: st, Node: "node-b", Identity: lease.Identity{Node: "node-b", Owner: "node-b#1"},
		Metrics: NewMetrics(prometheus.NewRegistry()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	s := &session{sup: sv, name: rep.Session, report: rep, routes: routesBySession(cfg)[rep.Session], log: sv.o.Logger}
	ids := s.endpointIDs()
	if len(ids) != 1 {
		t.Fatalf("endpoints %v", ids)
	}
	old := s.claim("node-a#1")
	old.Node = "node-a"
	if _, err := other.Claim(ctx, ids, old, rep.Timing.LeaseTTL); err != nil {
		t.Fatal(err)
	}
	wait := func() {
		s.mu.Lock()
		p := s.pre
		s.mu.Unlock()
		if p != nil {
			<-p.done
		}
	}

	// The row is held by node-a#1, not by the owner the handover names.
	s.claimAhead("node-c#1")
	wait()
	s.dropPreclaim()
	if got := claimRow(t, other, ids[0]); got != "node-a#1" {
		t.Fatalf("after a claim ahead from node-c#1: held by %q, want node-a#1", got)
	}
	// From node-a#1: taken over, and the activation uses it.
	s.claimAhead("node-a#1")
	wait()
	if got := claimRow(t, other, ids[0]); got != "node-b#1" {
		t.Fatalf("after a claim ahead from node-a#1: held by %q, want node-b#1", got)
	}
	release, err := s.claimEndpoints(ctx, "node-b#1")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if got := claimRow(t, other, ids[0]); got != "" {
		t.Fatalf("after the term's release: held by %q", got)
	}
	// Unused (the takeover failed): released.
	s.claimAhead("node-a#1")
	wait()
	s.dropPreclaim()
	testbin.Observe(t, 10*time.Second, func() (bool, string) { // a test timeout
		return claimRow(t, other, ids[0]) == "", "the release of an unused claim ahead"
	})
}
