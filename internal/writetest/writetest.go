// Package writetest is the requester side of the write contract
// (docs/writes.md) for tests: it publishes write requests to a real broker
// and collects every reply by request id, so a test can check that each
// request got exactly one outcome.
package writetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/dataplane"
)

// Requester publishes on a request topic and collects the replies on a
// reply topic.
type Requester struct {
	// C is the requester's MQTT client, for raw publishes.
	C    paho.Client
	req  string
	mu   sync.Mutex
	byID map[string][]dataplane.WriteReply
	n    int
	lost []string
}

// New connects a requester with a fresh persistent session to the broker
// at url and subscribes to replyTopic at QoS 1; requests go to reqTopic.
// The session is persistent so that a reconnect on a loaded machine loses
// no QoS 1 reply; a lost connection is recorded (Lost).
func New(t testing.TB, url, reqTopic, replyTopic string) *Requester {
	t.Helper()
	r := &Requester{req: reqTopic, byID: map[string][]dataplane.WriteReply{}}
	o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("requester-%d", time.Now().UnixNano())).SetCleanSession(false)
	o.SetMaxResumePubInFlight(64)
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		r.mu.Lock()
		r.lost = append(r.lost, time.Now().Format("15:04:05.000")+" "+err.Error())
		r.mu.Unlock()
	})
	r.C = paho.NewClient(o)
	if tok := r.C.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("requester connect: %v", tok.Error())
	}
	t.Cleanup(func() { r.C.Disconnect(100) })
	tok := r.C.Subscribe(replyTopic, 1, func(_ paho.Client, m paho.Message) {
		var rep dataplane.WriteReply
		if err := json.Unmarshal(m.Payload(), &rep); err != nil {
			t.Errorf("reply %q: %v", m.Payload(), err)
			return
		}
		r.mu.Lock()
		r.byID[rep.ID] = append(r.byID[rep.ID], rep)
		r.n++
		r.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", replyTopic, tok.Error())
	}
	return r
}

// Request is the JSON of a write request.
func Request(id, tag string, value any, issued time.Time) []byte {
	b, _ := json.Marshal(dataplane.WriteRequest{ID: id, Tag: tag, Value: value, IssuedAt: issued})
	return b
}

// Send publishes a request at QoS 1 and waits for the broker's ack.
func (r *Requester) Send(t testing.TB, id, tag string, value any, issued time.Time, retain bool) {
	t.Helper()
	if tok := r.C.Publish(r.req, 1, retain, Request(id, tag, value, issued)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", id, tok.Error())
	}
}

// Replies returns the replies to id so far.
func (r *Requester) Replies(id string) []dataplane.WriteReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byID[id])
}

// All returns every reply so far by id, and their number.
func (r *Requester) All() (map[string][]dataplane.WriteReply, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := maps.Clone(r.byID)
	for id, reps := range out {
		out[id] = slices.Clone(reps)
	}
	return out, r.n
}

// Lost lists the requester's lost connections, with their times.
func (r *Requester) Lost() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lost)
}

// WaitReply waits until id has a reply with code (any code when "").
func (r *Requester) WaitReply(t testing.TB, id, code string, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		for _, rep := range r.Replies(id) {
			if code == "" || rep.Code == code {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q reply to %s within %s: %+v", code, id, limit, r.Replies(id))
		}
	}
}

// WaitCount waits until n replies have arrived. It fails when none
// arrives for stall: the bridge stopped answering. A slow but moving
// burst on a loaded machine is not a failure; the test's own timeout
// bounds the whole.
func (r *Requester) WaitCount(t testing.TB, n int, stall time.Duration) {
	t.Helper()
	last, lastAt := -1, time.Now()
	for {
		r.mu.Lock()
		got := r.n
		r.mu.Unlock()
		if got >= n {
			return
		}
		if got != last {
			last, lastAt = got, time.Now()
		}
		if time.Since(lastAt) > stall {
			t.Fatalf("%d replies of %d, then none for %s (requester connections lost: %q)", got, n, stall, r.Lost())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
