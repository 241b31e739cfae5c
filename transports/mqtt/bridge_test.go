package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	same := testBroker("tcp://127.0.0.1:1883")
	if _, err := NewBridge("b", newClient(t, same, "s"), newClient(t, same, "s"), []*routes.TopicMap{{From: "a"}}); !errors.Is(err, ErrConfig) {
		t.Errorf("bridge onto the same broker and client id: %v", err)
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
	// The subscribers can have a message before the bridge counts it: the
	// count follows the target's PUBACK.
	waitForwarded(t, br, n, 1)
	in, out := br.Forwarded()
	t.Logf("delivered %d distinct of %d (%d deliveries incl. duplicates); bridge forwarded in %d, out %d; connect attempts remote %d local %d",
		len(got), n, len(ms), in, out, remote.ConnectAttempts(), local.ConnectAttempts())
}

// waitForwarded waits until br counted at least in and out forwards: a
// forward is counted after the target's acknowledgement, which can come
// after a subscriber of the target already has the message.
func waitForwarded(t *testing.T, br *Bridge, in, out int64) {
	t.Helper()
	deadline := time.Now().Add(hang)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		gotIn, gotOut := br.Forwarded()
		if gotIn >= in && gotOut >= out {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge %s forwarded in %d out %d within %v, want at least %d and %d", br.Name(), gotIn, gotOut, hang, in, out)
		}
		<-tick.C
	}
}

// waitForAll waits for the payloads 0..n-1 and names the missing ones
// when they do not all arrive: which message is lost tells why.
func (w *watcher) waitForAll(t *testing.T, n int) []paho.Message {
	t.Helper()
	deadline := time.After(hang)
	for {
		w.mu.Lock()
		ms := append([]paho.Message(nil), w.msgs...)
		w.mu.Unlock()
		got := unique(ms)
		if len(got) == n {
			return ms
		}
		select {
		case <-w.ch:
		case <-deadline:
			var missing []int
			for i := range n {
				if !got[strconv.Itoa(i)] {
					missing = append(missing, i)
				}
			}
			t.Fatalf("waiting for all %d messages: have %d deliveries, %d distinct, missing %v", n, len(ms), len(got), missing)
		}
	}
}

func unique(ms []paho.Message) map[string]bool {
	u := map[string]bool{}
	for _, m := range ms {
		u[string(m.Payload())] = true
	}
	return u
}

// bridgeOwner is one node's side of a bridged session.
type bridgeOwner struct {
	remote, local *Client
	br            *Bridge
	cancel        context.CancelFunc
	done          chan error
}

func startBridgeOwner(t *testing.T, remoteURL, localURL string, epoch uint64) *bridgeOwner {
	t.Helper()
	o := &bridgeOwner{
		remote: newClient(t, testBroker(remoteURL), "fo"),
		local:  newClient(t, testBroker(localURL), "fo"),
		done:   make(chan error, 1),
	}
	var err error
	o.br, err = NewBridge("bridge:fo", o.remote, o.local, []*routes.TopicMap{{From: "plant/#", To: "site/", QoS: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{o.local, o.remote} {
		c.SetIdentity(Identity{Owner: fmt.Sprintf("node-%d", epoch), Epoch: epoch})
		if _, err := open(t, c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go func() { o.done <- o.br.Run(ctx) }()
	return o
}

func (o *bridgeOwner) stop(t *testing.T) {
	t.Helper()
	o.cancel()
	<-o.done
	for _, c := range []*Client{o.remote, o.local} {
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// A failover of a bridged session loses nothing at QoS 1: what the old
// owner had not forwarded, and what arrived while nobody owned the
// session, reaches the new owner through the session's fixed client id;
// the brokers never see two bridge connections.
//
// The brokers are mosquitto, not the embedded mochi: mochi v2.7.9 keeps the
// server's and the client's packet identifiers in one in-flight map, so the
// old owner's QoS 1 "released" status publish (paho's next id) deleted the
// undelivered message the broker had sent under the same id, and it
// fans a message out after acknowledging it to the producer, losing it when
// the new owner's connect takes the session over meanwhile. Both lost one
// message in ~1 run of 10 under load; neither is the bridge's doing.
func TestBridgeFailoverWithoutLoss(t *testing.T) {
	const n = 200
	remoteB := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	localB := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	sub := watch(t, localB.URL, "subscriber", "site/#", 1, false)
	prod := producer(t, remoteB.URL)

	a := startBridgeOwner(t, remoteB.URL, localB.URL, 1)
	var b *bridgeOwner
	for i := range n {
		switch i {
		case n / 3:
			// Stop the old owner mid-stream: after it forwarded something
			// (a loaded machine may have it forward nothing so far).
			waitForwarded(t, a.br, 1, 0)
			a.stop(t)
		case 2 * n / 3:
			b = startBridgeOwner(t, remoteB.URL, localB.URL, 2)
		}
		for {
			tok := prod.Publish("plant/p", 1, false, strconv.Itoa(i))
			if tok.WaitTimeout(2*time.Second) && tok.Error() == nil {
				break
			}
		}
	}
	ms := sub.waitForAll(t, n)
	ina, _ := a.br.Forwarded()
	inb, _ := b.br.Forwarded()
	t.Logf("old owner forwarded %d, new owner %d, %d deliveries for %d messages", ina, inb, len(ms), n)
	if ina == 0 || inb < n/3 {
		t.Fatalf("forwarded old %d new %d: the new owner did not take the rest over", ina, inb)
	}
	b.stop(t)
	// Two connections with one client id at once: the broker logs that it
	// closed the older one.
	for name, mq := range map[string]*testmqtt.Mosquitto{"remote": remoteB, "local": localB} {
		if log := mq.Log(); strings.Contains(log, "already connected") {
			t.Errorf("the %s broker saw two connections for one client id:\n%s", name, log)
		}
	}
}

func TestTopicMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true}, {"a/b", "a/c", false}, {"a/+", "a/b", true}, {"a/+", "a/b/c", false},
		{"a/#", "a", true}, {"a/#", "a/b/c", true}, {"#", "x/y", true}, {"+/b", "a/b", true},
		{"a/b/c", "a/b", false}, {"+", "a/b", false},
	} {
		if got := TopicMatches(tc.filter, tc.topic); got != tc.want {
			t.Errorf("TopicMatches(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
}

// A retained message the remote broker replays when the bridge subscribes
// (as at every takeover) is forwarded, except into a write request topic:
// a stored command never reaches a write route. Live commands still pass.
func TestBridgeNeverForwardsRetainedIntoWriteTopics(t *testing.T) {
	remoteMQ := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	localMQ := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	prod := producer(t, remoteMQ.URL)
	for topic, payload := range map[string]string{"cmd/plc/w/req": "stored command", "plant/temp": "21.5"} {
		if tok := prod.Publish(topic, 1, true, payload); !tok.WaitTimeout(hang) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	sub := watch(t, localMQ.URL, "subscriber", "#", 1, true)

	remote := newClient(t, testBroker(remoteMQ.URL), "rt")
	local := newClient(t, testBroker(localMQ.URL), "rt")
	br, err := NewBridge("bridge:rt", remote, local, []*routes.TopicMap{
		{From: "cmd/#", Direction: In, QoS: 1},
		{From: "plant/#", Direction: In, QoS: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	br.RefuseRetainedInto([]string{"cmd/+/w/req"}, nil)
	for _, c := range []*Client{local, remote} {
		if _, err := open(t, c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- br.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runDone })

	sub.waitFor(t, "the retained data value", func(ms []paho.Message) bool {
		for _, m := range ms {
			if m.Topic() == "plant/temp" && string(m.Payload()) == "21.5" {
				return true
			}
		}
		return false
	})
	// A live command after the replay: it passes, and by the time it
	// arrived the stored one would have.
	if tok := prod.Publish("cmd/plc/w/req", 1, false, "live command"); !tok.WaitTimeout(hang) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	ms := sub.waitFor(t, "the live command", func(ms []paho.Message) bool {
		for _, m := range ms {
			if string(m.Payload()) == "live command" {
				return true
			}
		}
		return false
	})
	for _, m := range ms {
		if string(m.Payload()) == "stored command" {
			t.Errorf("the stored command was forwarded to %s", m.Topic())
		}
	}
	if got := br.refused.Load(); got != 1 {
		t.Errorf("retained messages refused = %d, want 1", got)
	}
}
