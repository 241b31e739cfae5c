package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/httpapi"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// health is what the bridge's endpoints say about the lease store.
type health struct {
	code    int // of /readyz
	ready   httpapi.Readiness
	storeUp bool // leasebridge_lease_store_up
}

func (b *bridge) health(t *testing.T) health {
	t.Helper()
	var h health
	resp, err := http.Get(b.http.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	h.code = resp.StatusCode
	err = json.NewDecoder(resp.Body).Decode(&h.ready)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, metrics := get(t, b.http.URL+"/metrics")
	h.storeUp = strings.Contains(metrics, "\nleasebridge_lease_store_up 1\n")
	return h
}

// waitHealth waits until /readyz answers code and the gauge agrees, and
// returns when that was first seen.
func (b *bridge) waitHealth(t *testing.T, code int, limit time.Duration) time.Time {
	t.Helper()
	at, _ := b.waitHealthLag(t, code, limit)
	return at
}

// waitHealthLag is waitHealth that also returns the longest single poll
// it made: the observation's own latency, which grows when the machine is
// loaded.
func (b *bridge) waitHealthLag(t *testing.T, code int, limit time.Duration) (time.Time, time.Duration) {
	t.Helper()
	return testbin.Observe(t, limit, func() (bool, string) {
		h := b.health(t)
		ok := h.code == code && h.storeUp == (code == http.StatusOK) && h.ready.LeaseStoreUp == h.storeUp
		return ok, fmt.Sprintf("%s: /readyz %d (want %d), lease_store_up %v: %+v", b.node, h.code, code, h.storeUp, h.ready)
	})
}

// A lease store behind a blackhole is reported within one renew_interval
// plus renew_call_timeout of the cut: /readyz 503, the gauge 0, one ERROR
// line naming the endpoint; when the path heals, all three come back. A
// session's service level is not part of readiness: the owner stays ready
// while it serves, whatever its devices do.
func TestStoreCutShowsOnReadyzAndGauge(t *testing.T) {
	p := startPeers(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	px, err := faultproxy.Start(ctx, strings.TrimPrefix(p.etcd.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	a := p.bridgeVia(t, "node-a", "http://"+px.Addr())
	bound := failover.StoreDetectionBound(a.reports)
	waitFull(t, a, a.report.OwnerDeath.Total)
	a.waitHealth(t, http.StatusOK, bound)

	cut := time.Now()
	if err := px.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	// The test's own observation adds one /readyz and /metrics round trip.
	at, lag := a.waitHealthLag(t, http.StatusServiceUnavailable, 2*bound)
	seen := at.Sub(cut)
	// Judged against the bound plus the observation's own latency: one
	// poll of /readyz can take that long on a loaded machine.
	if seen > bound+lag {
		t.Errorf("store cut seen after %s, bound renew_interval + renew_call_timeout = %s (+ %s, the longest /readyz poll)", seen, bound, lag)
	}
	if h := a.health(t); !strings.Contains(strings.Join(h.ready.NotReady, ";"), "lease store unreachable") {
		t.Errorf("not_ready = %q", h.ready.NotReady)
	}
	healed := time.Now()
	if err := px.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	// Back once the client has reconnected; the owner-death budget is the
	// longest outage the fleet is built to absorb.
	back := a.waitHealth(t, http.StatusOK, a.report.OwnerDeath.Total).Sub(healed)
	logs := a.logs.String()
	if n := strings.Count(logs, "lease store unreachable"); n != 1 {
		t.Errorf("%d 'lease store unreachable' lines, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, "endpoints=[http://"+px.Addr()+"]") || strings.Count(logs, "lease store reachable again") != 1 ||
		!strings.Contains(logs, "down_for=") {
		t.Errorf("log lacks the endpoint or the single 'reachable again' line with down_for:\n%s", logs)
	}
	t.Logf("store cut seen after %s (bound %s); back %s after the heal", seen, bound, back)
}

// A lease store at a port nobody listens on, from the start: the process
// runs, not ready, within the bound of its first probe.
func TestStoreUnreachableAtStart(t *testing.T) {
	p := startPeers(t)
	start := time.Now()
	a := p.bridgeVia(t, "node-a", "http://"+testbin.FreeAddr(t))
	bound := failover.StoreDetectionBound(a.reports)
	// Not ready from the start; the log line comes with the first probe's
	// failure.
	a.waitHealth(t, http.StatusServiceUnavailable, bound)
	for !strings.Contains(a.logs.String(), "lease store unreachable") {
		if time.Since(start) > 2*bound {
			t.Fatalf("no 'lease store unreachable' line within %s:\n%s", 2*bound, a.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	seen := time.Since(start)
	if seen > bound {
		t.Errorf("unreachable store logged after %s, bound %s", seen, bound)
	}
	if h := a.health(t); h.code != http.StatusServiceUnavailable || h.storeUp {
		t.Errorf("after the first probe: /readyz %d, lease_store_up %v", h.code, h.storeUp)
	}
	if s := a.status(); s.Owner {
		t.Errorf("owner without a store: %+v", s)
	}
	t.Logf("unreachable store reported %s after start (bound %s)", seen, bound)
}

// Readiness is about the process, not the device: an owner whose PLC
// refuses every connection cannot reach ServiceLevelFull, and it stays
// ready; /sessions shows the session short of full service.
func TestReadyWhileDeviceDown(t *testing.T) {
	p := startPeers(t)
	if err := p.plc.Proxy().SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	a := p.bridge(t, "node-a")
	deadline := time.Now().Add(a.report.OwnerDeath.Total)
	for s := a.status(); !s.Owner; s = a.status() {
		if time.Now().After(deadline) {
			t.Fatalf("no owner within %s: %+v", a.report.OwnerDeath.Total, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.waitHealth(t, http.StatusOK, failover.StoreDetectionBound(a.reports))
	resp, err := http.Get(a.http.URL + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	var got []failover.SessionStatus
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || len(got) != 1 || got[0].Session != "plc" || !got[0].Owner || got[0].ServiceLevelFull {
		t.Fatalf("/sessions = %+v, %v; want the owned session short of ServiceLevelFull", got, err)
	}
}
