package mqtt

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/routes"
)

func TestMappingTargets(t *testing.T) {
	for _, tc := range []struct{ from, to, topic, want string }{
		{"plant/#", "site/", "plant/l1/temp", "site/l1/temp"},
		{"plant/#", "site", "plant/l1/temp", "site/l1/temp"},
		{"plant/+/temp", "x/", "plant/l1/temp", "x/l1/temp"},
		{"#", "remote", "a/b", "remote/a/b"},
		{"a/b", "c/d", "a/b", "c/d"},
		{"a/#", "", "a/b", "a/b"},
	} {
		m, err := newMapping(&routes.TopicMap{From: tc.from, To: tc.to, QoS: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.target(tc.topic); got != tc.want {
			t.Errorf("from %q to %q: %q -> %q, want %q", tc.from, tc.to, tc.topic, got, tc.want)
		}
	}
	for _, bad := range []routes.TopicMap{{From: "a", QoS: 3}, {From: "a", Direction: "sideways"}, {From: "a/#", To: "b/#"}, {To: "x"}} {
		if _, err := newMapping(&bad); err == nil {
			t.Errorf("mapping %+v accepted", bad)
		}
	}
}

// producer publishes at QoS 1 and retries each message until the broker
// acknowledged it (at-least-once on the producing side too).
func producer(t *testing.T, url string) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID("producer").SetProtocolVersion(4).
		SetCleanSession(false).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(100 * time.Millisecond).SetMaxReconnectInterval(200 * time.Millisecond)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(hang) || tok.Error() != nil {
		t.Fatalf("producer connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

// The bridge route end to end at QoS 1, in and out, across a restart of
// the local broker and then of the remote one: nothing is lost.
func TestBridgeQoS1AcrossBrokerRestarts(t *testing.T) {
	const n = 300
	remoteMQ := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{Persistence: true})
	localMQ := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{Persistence: true})

	remote := newClient(t, testBroker(remoteMQ.URL), "br")
	local := newClient(t, testBroker(localMQ.URL), "br")
	br, err := NewBridge("bridge:br", remote, local, []*routes.TopicMap{
		{From: "plant/#", To: "site/", Direction: In, QoS: 1},
		{From: "cmd/#", Direction: Out, QoS: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{local, remote} {
		if _, err := open(t, c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- br.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runDone })

	sub := watch(t, localMQ.URL, "subscriber", "site/#", 1, false)
	back := watch(t, remoteMQ.URL, "back", "cmd/#", 1, true)
	prod := producer(t, remoteMQ.URL)

	restart := func(which string, mq *testmqtt.Mosquitto) {
		in, _ := br.Forwarded()
		mq.Stop()
		mq.Restart()
		t.Logf("restarted the %s broker after %d of %d messages forwarded", which, in, n)
		if in >= n {
			t.Errorf("%s restart came after the stream ended (%d forwarded): it proves nothing", which, in)
		}
	}
	for i := range n {
		switch i {
		case n / 3:
			restart("local", localMQ)
		case 2 * n / 3:
			restart("remote", remoteMQ)
		}
		payload := strconv.Itoa(i)
		for {
			tok := prod.Publish("plant/line1/count", 1, false, payload)
			if tok.WaitTimeout(2*time.Second) && tok.Error() == nil {
				break
			}
		}
	}

	// The way back: a command on the local broker reaches the remote one.
	if err := local.Publish(context.Background(), "cmd/valve", 1, false, []byte("open")); err != nil {
		t.Fatal(err)
	}

	ms := sub.waitFor(t, fmt.Sprintf("all %d messages on the local broker", n), func(ms []paho.Message) bool {
		return len(unique(ms)) == n
	})
	got := unique(ms)
	for i := range n {
		if !got[strconv.Itoa(i)] {
			t.Fatalf("message %d lost", i)
		}
	}
	for _, m := range ms {
		if m.Topic() != "site/line1/count" {
			t.Fatalf("mapped topic %q", m.Topic())
		}
	}
	bm := back.waitFor(t, "command on the remote broker", func(ms []paho.Message) bool { return len(ms) >= 1 })
	if bm[0].Topic() != "cmd/valve" || string(bm[0].Payload()) != "open" {
		t.Fatalf("out direction delivered %s %q", bm[0].Topic(), bm[0].Payload())
	}
	in, out := br.Forwarded()
	t.Logf("delivered %d distinct of %d (%d deliveries incl. duplicates); bridge forwarded in %d, out %d; connect attempts remote %d local %d",
		len(got), n, len(ms), in, out, remote.ConnectAttempts(), local.ConnectAttempts())
	if in < n || out < 1 {
		t.Fatalf("forwarded in %d out %d", in, out)
	}
}

func unique(ms []paho.Message) map[string]bool {
	u := map[string]bool{}
	for _, m := range ms {
		u[string(m.Payload())] = true
	}
	return u
}
