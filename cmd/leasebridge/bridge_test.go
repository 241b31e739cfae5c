package main

import (
	"context"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/bridgetrial"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
)

// bridgeRate is the traffic: 50 QoS 1 messages a second each way.
const bridgeRate = 50

func bridgeOptions(t *testing.T) bridgetrial.Options {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	etcd, err := etcdembed.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	return bridgetrial.Options{Etcd: etcd.Endpoints[0], KeyPrefix: "/bridge-test/", Rate: bridgeRate,
		Before: 2 * time.Second, After: 2 * time.Second}
}

// The owner of a bridge route is SIGKILLed while 50 messages a second
// flow each way at QoS 1. With both brokers' max_queued_messages sized as
// docs/bridged-data.md says (rate x owner-death budget), every sequence
// number arrives in each direction; duplicates are counted and reported;
// the takeover is within the admitted owner-death budget; the successor
// counts what it forwarded in leasebridge_bridge_forwarded_total.
func TestRunBridgeRouteOwnerDeath(t *testing.T) {
	r := bridgetrial.Run(t, bridgeOptions(t))
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
	r := bridgetrial.Run(t, o)
	// The gap lasts at least lease_ttl (2s): about 100 messages each way
	// against a queue of 10 plus mosquitto's in-flight window of 20.
	if r.In.Lost == 0 || r.Out.Lost == 0 {
		t.Errorf("queue limit %d, takeover %s: lost in %d, out %d; want loss in both directions", o.QueueLimit, r.Takeover, r.In.Lost, r.Out.Lost)
	}
	t.Logf("queue limit %d, takeover %s: in %d of %d lost, out %d of %d lost", o.QueueLimit, r.Takeover, r.In.Lost, r.In.Sent, r.Out.Lost, r.Out.Sent)
}
