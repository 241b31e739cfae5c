package failover_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// devicePaths gives each bridge its own path to the PLC, so that one
// node's device path can be cut alone, with device_path_step_down d.
func devicePaths(t *testing.T, p *peers, d time.Duration, nodes ...string) (map[string]*bridge, map[string]*faultproxy.Proxy) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bridges, paths := map[string]*bridge{}, map[string]*faultproxy.Proxy{}
	for _, n := range nodes {
		px, err := faultproxy.Start(ctx, p.plc.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		paths[n] = px
		bridges[n] = p.bridgeWith(t, n, func(b *testbin.Bridge) {
			b.PLC = px.Addr()
			b.Manager = fmt.Sprintf("  device_path_step_down: %s\n", d)
		})
	}
	return bridges, paths
}

// An owner whose device path is cut while it serves releases that one
// session within the device-path budget of the cut and cools down; the
// other node, which reaches the device, takes over. Run keeps going.
func TestDevicePathCutWhileServing(t *testing.T) {
	p := startPeers(t)
	const d = time.Second
	bs, paths := devicePaths(t, p, d, "node-a")
	a := bs["node-a"]
	waitFull(t, a, a.report.OwnerDeath.Total)
	more, morePaths := devicePaths(t, p, d, "node-b")
	b := more["node-b"]
	time.Sleep(300 * time.Millisecond)
	if s := b.status(); s.Owner {
		t.Fatalf("second bridge owns the session: %+v", s)
	}
	cut := time.Now()
	if err := paths["node-a"].SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	budget := a.report.DevicePath.Total
	full := waitFull(t, b, budget).Sub(cut)
	if full > budget {
		t.Errorf("takeover %s after the device cut, device-path budget %s", full, budget)
	}
	select {
	case err := <-a.done:
		t.Fatalf("the releasing node's Run returned %v: a device-path release must not stop the process", err)
	default:
	}
	if s := a.status(); s.Owner || s.State != "cooldown" && s.State != "standby" {
		t.Errorf("releasing node: %+v", s)
	}
	if n := morePaths["node-b"].Stats(); n.Current != 1 {
		t.Errorf("node B's path to the PLC has %d connections, want 1", n.Current)
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("the PLC saw %d concurrent connections", peak)
	}
	_, m := get(t, a.http.URL+"/metrics")
	if !strings.Contains(m, `leasebridge_device_step_downs_total{session="plc"} 1`) {
		t.Errorf("/metrics lacks the device step-down")
	}
	if st := b.status(); time.Duration(st.FailureToFullNS) < d || time.Duration(st.FailureToFullNS) > budget {
		t.Errorf("successor FailureToFullDuration %s: want from the old owner's first failed poll, between %s and %s", time.Duration(st.FailureToFullNS), d, budget)
	}
	t.Logf("device path cut on the owner: standby at ServiceLevelFull %s after the cut (device-path budget %s)", full, budget)
}

// A device that is down for every node does not churn the lease: each term
// lasts at least device_path_step_down and a releasing node sits out its
// cooldown, so over a window W the session changes hands at most W/D + 1
// times (without the threshold counted from the term start and the
// cooldown it would change hands every poll).
func TestDeviceDownForEveryoneBoundsChurn(t *testing.T) {
	p := startPeers(t)
	if err := p.plc.Proxy().SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	const d = time.Second
	bs, _ := devicePaths(t, p, d, "node-a", "node-b")
	start := time.Now()
	const window = 6 * time.Second
	cooled := map[string]bool{}
	for time.Since(start) < window {
		for n, b := range bs {
			if b.status().State == "cooldown" {
				cooled[n] = true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	takeovers := 0
	for n, b := range bs {
		_, m := get(t, b.http.URL+"/metrics")
		var k int
		for _, line := range strings.Split(m, "\n") {
			if _, err := fmt.Sscanf(line, `leasebridge_takeovers_total{session="plc"} %d`, &k); err == nil {
				takeovers += k
			}
		}
		if !cooled[n] {
			t.Errorf("%s never cooled down", n)
		}
	}
	bound := int(window/d) + 1
	if takeovers > bound || takeovers < 2 {
		t.Errorf("%d takeovers in %s with device_path_step_down %s: want between 2 and %d", takeovers, window, d, bound)
	}
	if s := p.plc.Proxy().Stats(); s.Peak > 0 {
		t.Errorf("the PLC, cut for everyone, accepted %d connections", s.Peak)
	}
	t.Logf("device down for everyone: %d takeovers in %s (bound %d)", takeovers, window, bound)
}
