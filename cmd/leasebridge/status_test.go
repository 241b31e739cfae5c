package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/routes"
)

// statusConfig has one session per device; d3 is pinned to edge-1.
func statusConfig(etcd string, sessions ...string) string {
	y := fmt.Sprintf(`deployment_mode: clustered
node: cli
lease_store: {endpoints: [%s], key_prefix: /status-test/}
manager: {failover_slo: 10m, broker_health_step_down: 60s}
brokers:
  local: {url: "tcp://127.0.0.1:1883"}
devices:
`, etcd)
	for i, s := range sessions {
		pin := ""
		if s == "pinned" {
			pin = ", nodes: [edge-1]"
		}
		y += fmt.Sprintf("  d%d: {kind: modbus_tcp, address: \"127.0.0.1:%d\"%s, groups: [{name: g, interval: 1s, tags: [{name: t, address: \"1\", type: int16}]}]}\n", i, 15020+i, pin)
	}
	y += "routes:\n"
	for i, s := range sessions {
		y += fmt.Sprintf("  - {name: r%d, session: %s, kind: poll, device: d%d, broker: local}\n", i, s, i)
	}
	return y
}

// `leasebridge status` against a real etcd with an owned, an unowned, a
// pinned (its only node dead) and a mismatched session.
func TestStatusOwnedUnownedPinnedMismatched(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(file, []byte(statusConfig(c.Endpoints()[0], "owned", "unowned", "pinned", "mismatch")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := routes.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	timing := lease.ConfigFromReport(preflightOf(t, cfg).Admit()[0]).RowTiming()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, KeyPrefix: "/status-test/"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other := timing
	other.LeaseTTL *= 2
	if _, err := st.CompareAndSwap(ctx, "owned", 0, lease.Row{Owner: "a#1", Node: "a", Epoch: 4, Timing: timing}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompareAndSwap(ctx, "mismatch", 0, lease.Row{Owner: "b#1", Node: "b", Epoch: 2, Timing: other}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, n := range []lease.NodeRow{
		{Node: "a", Owner: "a#1", Sessions: []string{"mismatch", "owned", "unowned"}, Owned: []string{"owned"}, Serving: []string{"owned"}},
		{Node: "b", Owner: "b#1", Sessions: []string{"mismatch", "owned", "unowned"}, Owned: []string{"mismatch"}},
	} {
		n.Interval, n.TTL, n.RenewedAt = timing.RenewInterval, timing.LeaseTTL, now.UnixNano()
		if err := st.PutNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// edge-1 died a minute ago, owning the pinned session.
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	dead := now.Add(-time.Minute).UnixNano()
	for k, v := range map[string]any{
		"/status-test/pinned":        lease.Row{Owner: "edge-1#1", Node: "edge-1", Epoch: 9, Timing: timing, RenewedAt: dead},
		"/status-test/_nodes/edge-1": lease.NodeRow{Node: "edge-1", Owner: "edge-1#1", Sessions: []string{"pinned"}, TTL: timing.LeaseTTL, RenewedAt: dead},
	} {
		b, _ := json.Marshal(v)
		if _, err := cli.Put(ctx, k, string(b)); err != nil {
			t.Fatal(err)
		}
	}

	got, code := fleetStatus(t, file)
	if code != exitRefused || got.AllOwned {
		t.Errorf("status exit %d all_owned %v, want 1 and false", code, got.AllOwned)
	}
	by := map[string]fleetview.Session{}
	for _, s := range got.Sessions {
		by[s.Session] = s
	}
	check := func(name string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("session %s: %+v", name, by[name])
		}
	}
	o := by["owned"]
	check("owned", o.Status == fleetview.Owned && o.Node == "a" && o.Epoch == 4 && o.ServiceLevel == "full" && o.TimingMismatch == nil &&
		o.RowAgeNS != nil && *o.RowAgeNS < int64(timing.LeaseTTL) && strings.Join(o.LiveEligible, ",") == "a,b" && o.OwnerEligible &&
		o.Timing != nil && *o.Timing == timing && o.HandoverBudgetNS > 0)
	u := by["unowned"]
	check("unowned", u.Status == fleetview.Unowned && u.RowVersion == 0 && u.ServiceLevel == "none" && u.Owner == "")
	p := by["pinned"]
	check("pinned", p.Status == fleetview.Stale && p.Node == "edge-1" && len(p.LiveEligible) == 0 &&
		strings.Join(p.Pinning.Nodes, ",") == "edge-1" && p.ServiceLevel == "unknown")
	m := by["mismatch"]
	check("mismatch", m.Status == fleetview.Owned && m.ServiceLevel == "activating" && m.TimingMismatch != nil &&
		m.TimingMismatch.Row.LeaseTTL == other.LeaseTTL && m.TimingMismatch.File.LeaseTTL == timing.LeaseTTL)
	if len(got.Nodes) != 3 || !got.Nodes[0].Live || !got.Nodes[1].Live || got.Nodes[2].Live {
		t.Errorf("nodes %+v: want a and b live, edge-1 not", got.Nodes)
	}

	var text, errb bytes.Buffer
	if code := run([]string{"status", "-c", file}, &text, &errb); code != exitRefused {
		t.Errorf("text status exit %d", code)
	}
	for _, want := range []string{"no live eligible node: runs nowhere", "timing mismatch: row lease_ttl", "NOT every session is owned"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}

	// A file of owned sessions only: exit 0.
	only := filepath.Join(dir, "owned.yaml")
	if err := os.WriteFile(only, []byte(statusConfig(c.Endpoints()[0], "owned")), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, code := fleetStatus(t, only); code != exitOK || !got.AllOwned {
		t.Errorf("owned-only file: exit %d all_owned %v", code, got.AllOwned)
	}
	// A store nobody listens on: exit 3.
	down := filepath.Join(dir, "down.yaml")
	if err := os.WriteFile(down, []byte(statusConfig("http://"+testbin.FreeAddr(t), "owned")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"status", "-c", down}, &text, &errb); code != exitStoreDown {
		t.Errorf("store down: exit %d, want %d", code, exitStoreDown)
	}
}

// TestStatusUnreachableStoreNamesEndpoint: with the store unreachable,
// status once waited its whole 10 s call without a word and its error
// did not name the endpoint. It fails within dial_timeout (the file sets
// 1 s), exit 3, naming the endpoint with its password redacted.
func TestStatusUnreachableStoreNamesEndpoint(t *testing.T) {
	// A listener that never answers: what a store behind a dropped
	// route looks like.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	orig, err := os.ReadFile("testdata/refused-60s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://leasebridge:hunter2@" + ln.Addr().String()
	text := strings.Replace(string(orig), "failover_slo: 60s", "failover_slo: 600s", 1)
	text = strings.Replace(text, "endpoints: [http://127.0.0.1:2379]", "endpoints: ["+endpoint+"]\n  dial_timeout: 1s", 1)
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"status", "-c", file}, &out, &errb)
	took := time.Since(start)
	msg := errb.String()
	if code != exitStoreDown {
		t.Errorf("status exit %d, want %d: %s", code, exitStoreDown, msg)
	}
	want := "lease store unreachable at http://leasebridge:xxxxx@" + ln.Addr().String() + " within dial_timeout 1s"
	if !strings.Contains(msg, want) || strings.Contains(msg, "hunter2") {
		t.Errorf("status said %q, want %q and no password", msg, want)
	}
	// The old wait was the whole fleet call.
	if took >= fleetCall {
		t.Errorf("status took %v, the whole fleet call %v, not dial_timeout", took, fleetCall)
	}
}

// TestStatusCountsFollowRows: node a was killed (or drained) while it
// owned and served s1; b has taken s1 over, but a's last node row, not
// yet expired, still claims it, and also s9, a session of another file
// that b took too. status once showed a as OWNED 1 SERVING 1 until its
// row was refreshed. The counts follow the session rows: a owns nothing,
// b owns s1 and s9 (serving what its own row says).
func TestStatusCountsFollowRows(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	file := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(file, []byte(statusConfig(c.Endpoints()[0], "s1")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := routes.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	timing := lease.ConfigFromReport(preflightOf(t, cfg).Admit()[0]).RowTiming()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, KeyPrefix: "/status-test/"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range []string{"s1", "s9"} {
		if _, err := st.CompareAndSwap(ctx, s, 0, lease.Row{Owner: "b#2", Node: "b", Epoch: 5, Timing: timing}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for _, n := range []lease.NodeRow{
		{Node: "a", Owner: "a#1", Sessions: []string{"s1", "s9"}, Owned: []string{"s1", "s9"}, Serving: []string{"s1", "s9"}, Draining: true},
		{Node: "b", Owner: "b#2", Sessions: []string{"s1", "s9"}, Owned: []string{"s1"}, Serving: []string{"s1"}},
	} {
		n.Interval, n.TTL, n.RenewedAt = timing.RenewInterval, timing.LeaseTTL, now.UnixNano()
		if err := st.PutNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	got, code := fleetStatus(t, file)
	if code != exitOK {
		t.Errorf("status exit %d", code)
	}
	for _, n := range got.Nodes {
		owned, serving := strings.Join(n.Owned, ","), strings.Join(n.Serving, ",")
		if (n.Node == "a" && (owned != "" || serving != "")) || (n.Node == "b" && (owned != "s1,s9" || serving != "s1")) {
			t.Errorf("node %s: owned %q serving %q, not what the rows say", n.Node, owned, serving)
		}
	}
}
