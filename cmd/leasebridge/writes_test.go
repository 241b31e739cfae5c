package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/internal/writetest"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// The owner process is killed while requests arrive at 10/s for the whole
// takeover. Every request gets an outcome, executed or refused, none is
// dropped; the device executes each at most once; a request older than
// max_age, queued while no owner ran, is refused and never reaches the
// device; a retained request is not executed again by the new owner.
func TestRunWritesAcrossOwnerDeath(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &runPeers{dir: t.TempDir()}
	var err error
	if p.etcd, err = etcdembed.Start(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.etcd.Close)
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	p.brokerAddr = mq.Addr
	if p.plc, err = plcsim.Start(ctx, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.plc.Close() })
	req := writetest.New(t, mq.URL, "w/req", "w/resp")
	var statusMu sync.Mutex
	var statuses []mqtt.StatusMessage
	if tok := req.C.Subscribe("leasebridge/plc/status", 1, func(_ paho.Client, m paho.Message) {
		var s mqtt.StatusMessage
		if json.Unmarshal(m.Payload(), &s) == nil {
			statusMu.Lock()
			statuses = append(statuses, s)
			statusMu.Unlock()
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe status: %v", tok.Error())
	}

	a := p.start(t, "node-a")
	if _, _, err := waitOwner(ctx, []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	b := p.start(t, "node-b")
	maxAge := routes.DefaultWriteMaxAge // testbin's write route keeps the default
	budget := b.report.OwnerDeath.Total

	// A retained request, executed live by the owner.
	req.Send(t, "retained", "setpoint", 4000, time.Now(), true)
	req.WaitReply(t, "retained", dataplane.WriteOK, 5*time.Second)

	// 10 requests a second from before the kill until the new owner serves
	// and 1s after.
	stop := make(chan struct{})
	sent := make(chan []string, 1)
	go func() {
		var ids []string
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			id := fmt.Sprintf("seq-%d", i)
			req.Send(t, id, "setpoint", 1000+i, time.Now(), false)
			ids = append(ids, id)
			select {
			case <-stop:
				sent <- ids
				return
			case <-tick.C:
			}
		}
	}()
	time.Sleep(time.Second) // some requests served by the first owner
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Queued while no owner runs, issued longer than max_age ago.
	req.Send(t, "stale", "setpoint", 3000, time.Now().Add(-maxAge-time.Second), false)
	if _, _, err := waitOwner(ctx, []*bridgeProc{b.bridgeProc}, nil, budget+time.Second); err != nil {
		t.Fatal(err)
	}
	takeover := time.Since(killed)
	time.Sleep(time.Second)
	close(stop)
	ids := <-sent

	req.WaitReply(t, "stale", dataplane.WriteStale, 5*time.Second)
	req.WaitReply(t, "retained", dataplane.WriteRetained, 5*time.Second)
	for _, id := range ids {
		req.WaitReply(t, id, "", 10*time.Second)
	}

	written := map[uint16]int{}
	for _, w := range p.plc.Writes() {
		if w.Addr == plcsim.SetpointRegister && len(w.Values) == 1 {
			written[w.Values[0]]++
		}
	}
	if written[3000] != 0 {
		t.Errorf("the stale request reached the device %d times", written[3000])
	}
	if written[4000] != 1 {
		t.Errorf("the retained request reached the device %d times, want 1 (live, never replayed)", written[4000])
	}
	// The stored copy was cleared: a new subscriber gets no retained
	// request before a marker published after it subscribed.
	marker := make(chan struct{})
	var stored []string
	var storedMu sync.Mutex
	if tok := req.C.Subscribe("w/#", 1, func(_ paho.Client, m paho.Message) {
		if m.Topic() == "w/marker" {
			close(marker)
			return
		}
		if m.Retained() && len(m.Payload()) > 0 {
			storedMu.Lock()
			stored = append(stored, string(m.Payload()))
			storedMu.Unlock()
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe w/#: %v", tok.Error())
	}
	if tok := req.C.Publish("w/marker", 1, false, "x"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	select {
	case <-marker:
	case <-time.After(10 * time.Second):
		t.Fatal("marker not delivered")
	}
	storedMu.Lock()
	if len(stored) != 0 {
		t.Errorf("retained requests still stored on the broker: %q", stored)
	}
	storedMu.Unlock()
	outcomes := map[string]int{}
	for i, id := range ids {
		v := uint16(1000 + i + 1)
		var final []string
		executedOK := false
		for _, rep := range req.Replies(id) {
			if rep.Code != dataplane.WriteRedelivered {
				final = append(final, rep.Code)
			}
			executedOK = executedOK || rep.Code == dataplane.WriteOK
		}
		switch {
		case len(final) > 1:
			t.Errorf("%s: %d outcomes %v, want one", id, len(final), final)
		case written[v] > 1:
			t.Errorf("%s: written %d times", id, written[v])
		case executedOK && written[v] != 1:
			t.Errorf("%s: answered ok, written %d times", id, written[v])
		case len(final) == 1 && !executedOK && written[v] != 0:
			t.Errorf("%s: refused %v, but written", id, final)
		}
		code := dataplane.WriteRedelivered
		if len(final) == 1 {
			code = final[0]
		}
		outcomes[code]++
	}
	// A request queued during the takeover is executed if it is still
	// within max_age when the new owner receives it, else refused stale
	// (the admitted budget may exceed max_age; this takeover did not).
	if n := outcomes[dataplane.WriteOK] + outcomes[dataplane.WriteRedelivered] + outcomes[dataplane.WriteStale]; n != len(ids) {
		t.Errorf("outcomes %v of %d requests: want ok, stale or redelivered only", outcomes, len(ids))
	}
	if takeover+time.Second < maxAge && outcomes[dataplane.WriteStale] != 0 {
		t.Errorf("takeover took %s, but %d requests were refused stale (max_age %s)", takeover, outcomes[dataplane.WriteStale], maxAge)
	}
	var afterKill int
	for _, id := range ids {
		for _, rep := range req.Replies(id) {
			if rep.Code == dataplane.WriteOK && rep.Epoch > 1 {
				afterKill++
			}
		}
	}
	if afterKill == 0 {
		t.Error("the new owner executed no request")
	}
	if rep := req.Replies("stale"); len(rep) != 1 || rep[0].AgeMS == nil || *rep[0].AgeMS <= maxAge.Milliseconds() {
		t.Errorf("stale reply %+v: want one naming an age above max_age %s", rep, maxAge)
	}
	// Status: one "active" per takeover; the dead owner's "lost" names its
	// connection, not a time it could not know.
	statusMu.Lock()
	actives := map[uint64]int{}
	var lost []mqtt.StatusMessage
	for _, s := range statuses {
		switch s.State {
		case mqtt.StateActive:
			actives[s.Epoch]++
		case mqtt.StateLost:
			lost = append(lost, s)
		}
	}
	statusMu.Unlock()
	if actives[1] != 1 || actives[2] != 1 {
		t.Errorf("active status messages per epoch %v, want one each for epochs 1 and 2", actives)
	}
	if len(lost) != 1 || lost[0].Epoch != 1 || lost[0].Timestamp != 0 || lost[0].ConnectedAt == 0 || lost[0].ConnectedAt > killed.UnixMilli() {
		t.Errorf("lost status messages %+v: want one for epoch 1 with connected_at and no timestamp", lost)
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("PLC saw %d concurrent connections", peak)
	}
	t.Logf("owner killed; standby serving after %s (budget %s); %d requests at 10/s: %v; stale refused, retained replay refused",
		takeover, budget, len(ids), outcomes)
}
