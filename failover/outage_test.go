package failover_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// received collects what the real broker delivers on a filter.
type received struct {
	mu     sync.Mutex
	values []mqtt.ValueMessage
	states []string
	seen   chan struct{}
}

func (r *received) notify() {
	select {
	case r.seen <- struct{}{}:
	default:
	}
}

// waitFor waits, at most limit, until ok holds for what arrived.
func (r *received) waitFor(t *testing.T, limit time.Duration, what string, ok func(*received) bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		done := ok(r)
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-r.seen:
		case <-deadline.C:
			t.Fatalf("no %s within %s", what, limit)
		}
	}
}

// countQuality counts the values of quality q; a bad one counts only with
// its error and without a value, as docs/mqtt.md describes it.
func countQuality(vs []mqtt.ValueMessage, q string) int {
	n := 0
	for _, v := range vs {
		if v.Quality == q && (q != "bad" || (v.Error != "" && v.Value == nil && v.Epoch == 1)) {
			n++
		}
	}
	return n
}

// A 3 s device outage after activation is published: every failed poll
// publishes bad quality for the group's tags, the status topic says
// degraded, the device gauge and the session status say down; when the
// device answers again good values and "serving" follow.
func TestDeviceOutageIsPublished(t *testing.T) {
	p := startPeers(t)
	r := &received{seen: make(chan struct{}, 1)}
	if err := p.broker.Server.Subscribe("t/#", 1, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		var v mqtt.ValueMessage
		if json.Unmarshal(pk.Payload, &v) == nil {
			r.mu.Lock()
			r.values = append(r.values, v)
			r.mu.Unlock()
			r.notify()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.broker.Server.Subscribe("leasebridge/plc/status", 2, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		var s mqtt.StatusMessage
		if json.Unmarshal(pk.Payload, &s) == nil {
			r.mu.Lock()
			r.states = append(r.states, s.State)
			r.mu.Unlock()
			r.notify()
		}
	}); err != nil {
		t.Fatal(err)
	}
	a := p.bridge(t, "node-a")
	waitFull(t, a, a.report.OwnerDeath.Total)
	r.waitFor(t, 5*time.Second, "good value", func(r *received) bool { return countQuality(r.values, "good") > 0 })

	const outage = 3 * time.Second
	// A poll fails within request_timeout plus a poll interval of the cut.
	detect := 2 * time.Second
	r.mu.Lock()
	r.values, r.states = nil, nil
	r.mu.Unlock()
	cut := time.Now()
	if err := p.plc.Proxy().SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, detect, "bad-quality value during the outage", func(r *received) bool { return countQuality(r.values, "bad") >= 2 })
	r.waitFor(t, detect, "degraded status", func(r *received) bool { return contains(r.states, mqtt.StateDegraded) })
	st := a.status()
	if len(st.Devices) != 1 || st.Devices[0].Up || st.Devices[0].Error == "" || st.Devices[0].LastGoodUnixNS == 0 {
		t.Errorf("session status during the outage: %+v", st)
	}
	_, metrics := get(t, a.http.URL+"/metrics")
	for _, want := range []string{`leasebridge_device_up{device="plc",session="plc"} 0`, `leasebridge_device_last_good_timestamp_seconds{device="plc",session="plc"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics during the outage lacks %s", want)
		}
	}
	// The outage itself lasts 3 s (the scenario, not a wait for a
	// condition); bad values keep coming all along.
	r.mu.Lock()
	before := countQuality(r.values, "bad")
	r.mu.Unlock()
	time.Sleep(time.Until(cut.Add(outage)))
	r.mu.Lock()
	during := countQuality(r.values, "bad") - before
	goodDuring := countQuality(r.values, "good")
	r.values, r.states = nil, nil
	r.mu.Unlock()
	if during == 0 || goodDuring != 0 {
		t.Errorf("during the outage: %d more bad values, %d good ones; want bad values on every failed poll and no good one", during, goodDuring)
	}
	if err := p.plc.Proxy().SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	r.waitFor(t, detect, "good value after the outage", func(r *received) bool { return countQuality(r.values, "good") >= 2 })
	r.waitFor(t, detect, "serving status after the outage", func(r *received) bool { return contains(r.states, mqtt.StateServing) })
	if st := a.status(); len(st.Devices) != 1 || !st.Devices[0].Up || !st.ServiceLevelFull {
		t.Errorf("session status after the outage: %+v", st)
	}
	_, metrics = get(t, a.http.URL+"/metrics")
	if !strings.Contains(metrics, `leasebridge_device_up{device="plc",session="plc"} 1`) {
		t.Errorf("/metrics after the outage lacks device_up 1")
	}
	t.Logf("outage %s: %d bad values published during it, good again %s after it ended", outage, during+before, time.Since(healed))
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
