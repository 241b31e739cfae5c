package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/bridgetest"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
)

// bridgeRate is the traffic: 50 QoS 1 messages a second each way.
const bridgeRate = 50

func bridgeOptions(t *testing.T) bridgetest.Options {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	etcd, err := etcdembed.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	return bridgetest.Options{Etcd: etcd.Endpoints[0], KeyPrefix: "/bridge-test/", Rate: bridgeRate,
		Before: 2 * time.Second, After: 2 * time.Second}
}

// The owner of a bridge route is SIGKILLed while 50 messages a second
// flow each way at QoS 1. With both brokers' max_queued_messages sized as
// docs/bridged-data.md says (rate x owner-death budget), every sequence
// number arrives in each direction; duplicates are counted and reported;
// the takeover is within the admitted owner-death budget; the successor
// counts what it forwarded in leasebridge_bridge_forwarded_total.
func TestRunBridgeRouteOwnerDeath(t *testing.T) {
	r := bridgetest.Run(t, bridgeOptions(t))
	for _, p := range r.Problems() {
		t.Error(p)
	}
	t.Logf("%s killed, %s serving after %s (budget %s); queue limit %d; in: %d sent, %d lost, %d duplicates, successor forwarded %g; out: %d sent, %d lost, %d duplicates, successor forwarded %g",
		r.Owner, r.Successor, r.Takeover, r.Budget, r.QueueLimit, r.In.Sent, r.In.Lost, r.In.Duplicates, r.In.Forwarded,
		r.Out.Sent, r.Out.Lost, r.Out.Duplicates, r.Out.Forwarded)
}

// The negative control: with max_queued_messages far below rate x the
// gap, the brokers drop what the dead owner's session cannot hold, and
// the trial sees it. This is what the docs' arithmetic prevents.
func TestRunBridgeRouteQueueTooSmallLoses(t *testing.T) {
	o := bridgeOptions(t)
	o.QueueLimit = 10
	r := bridgetest.Run(t, o)
	// The gap lasts at least lease_ttl (2s): about 100 messages each way
	// against a queue of 10 plus mosquitto's in-flight window of 20.
	if r.In.Lost == 0 || r.Out.Lost == 0 {
		t.Errorf("queue limit %d, takeover %s: lost in %d, out %d; want loss in both directions", o.QueueLimit, r.Takeover, r.In.Lost, r.Out.Lost)
	}
	t.Logf("queue limit %d, takeover %s: in %d of %d lost, out %d of %d lost", o.QueueLimit, r.Takeover, r.In.Lost, r.In.Sent, r.Out.Lost, r.Out.Sent)
}

// Unsupported topology: a non-clustered broker per node. Node b's local
// broker is its own, so it never sees the owner's status: after standing
// by for the owner-death budget it reports the suspicion on /sessions and
// in leasebridge_broker_topology_suspect and warns once. Node c shares
// the owner's local broker and stands by as long without suspicion.
func TestRunBridgeTopologyPerNodeBrokerSuspect(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := bridgeOptions(t)
	budget := bridgetest.Budget(t, o)
	remote := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	shared := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	own := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	dir := t.TempDir()
	a := bridgetest.Start(t, o, dir, "node-a", shared.URL, remote.URL)
	if err := a.Wait(ctx, budget, bridgetest.Owning); err != nil {
		t.Fatal(err)
	}
	c := bridgetest.Start(t, o, dir, "node-c", shared.URL, remote.URL)
	if err := c.Wait(ctx, budget, bridgetest.Standing); err != nil {
		t.Fatal(err)
	}
	// c has judged its broker at least once by then.
	cJudged := time.Now().Add(budget + time.Second)
	b := bridgetest.Start(t, o, dir, "node-b", own.URL, remote.URL)
	suspect := func(s failover.SessionStatus) bool { return s.BrokerTopologySuspect != "" }
	if err := b.Wait(ctx, 2*budget, suspect); err != nil {
		t.Fatalf("per-node broker not detected: %v", err)
	}
	for time.Now().Before(cJudged) {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Owner || st.BrokerTopologySuspect != "" {
			t.Fatalf("node-c, on the owner's broker: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	series := `leasebridge_broker_topology_suspect{session="` + bridgetest.Session + `"}`
	if v := b.Metric(t, series); v != 1 {
		t.Errorf("node-b %s = %g, want 1", series, v)
	}
	if v := c.Metric(t, series); v != 0 {
		t.Errorf("node-c %s = %g, want 0", series, v)
	}
	const warn = "the local broker does not see the owner's messages"
	if n := strings.Count(b.Log(), warn); n != 1 {
		t.Errorf("node-b logged the warning %d times, want once", n)
	}
	if strings.Contains(c.Log(), warn) {
		t.Error("node-c, on the owner's broker, warned")
	}
	st, _ := b.Status(ctx)
	t.Logf("node-b: %s", st.BrokerTopologySuspect)
}
