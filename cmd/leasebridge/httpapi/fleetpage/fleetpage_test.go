package fleetpage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
)

// source is a fixed Source: the page's inputs, as the supervisor would
// return them.
type source struct {
	node  string
	fleet fleetview.Status
	err   error
	local []failover.SessionStatus
}

func (s source) Node() string                     { return s.node }
func (s source) Status() []failover.SessionStatus { return s.local }
func (s source) FleetStatus(context.Context, time.Time) (fleetview.Status, error) {
	return s.fleet, s.err
}

func get(t *testing.T, src Source) (int, string) {
	t.Helper()
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	return resp.StatusCode, string(b)
}

var local = []failover.SessionStatus{{Session: "plc", State: "serving", Owner: true, ServiceLevelFull: true,
	FailureToFullNS: int64(2310 * time.Millisecond), FailureToFullCause: failover.CauseOwnerDeath,
	FailureToFullBudgetNS: int64(13300 * time.Millisecond), OwnerDeathBudgetNS: int64(13300 * time.Millisecond),
	Devices: []failover.DeviceStatus{{Device: "plc", Up: true}, {Device: "scale", Up: false}}}}

// A store without fleet rows (the Kubernetes store) gives a page that says
// so and still lists this node's sessions, never an error.
func TestNoFleetRowsSaysSo(t *testing.T) {
	code, body := get(t, source{node: "node-a", err: failover.ErrNoFleet, local: local})
	if code != http.StatusOK {
		t.Errorf("status %d, want 200", code)
	}
	for _, want := range []string{`id="no-fleet"`, "keeps no fleet rows", `data-session="plc"`, "2.31s of 13.3s budget (17 %)",
		"cause owner_death", "1 of 2 up (down: scale)"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `id="nodes"`) {
		t.Error("a node table without fleet rows")
	}
}

// A store that cannot be read answers 503 with the error.
func TestStoreErrorIs503(t *testing.T) {
	code, body := get(t, source{node: "node-a", err: errors.New("etcd 127.0.0.1:2379: context deadline exceeded"), local: local})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `id="store-error"`) || !strings.Contains(body, "context deadline exceeded") {
		t.Errorf("status %d, body:\n%s", code, body)
	}
}

// The page loads nothing from elsewhere (plant networks are offline) and
// escapes what the store and the file say.
func TestSelfContainedAndEscaped(t *testing.T) {
	ttl := 2 * time.Second
	st := fleetview.Status{KeyPrefix: "/p/", AllOwned: false,
		Nodes: []fleetview.Node{{NodeRow: lease.NodeRow{Node: "node-a", Owner: "node-a#1", Owned: []string{"plc"}, Serving: []string{"plc"}}, Live: true},
			{NodeRow: lease.NodeRow{Node: "<b>x</b>", Draining: true}}},
		Sessions: []fleetview.Session{{Session: "plc", Status: fleetview.Owned, Node: "node-a", Owner: "node-a#1", Epoch: 7, ServiceLevel: "full",
			Pinning: routes.Pinning{Nodes: []string{"node-a"}}, LiveEligible: []string{"node-a"},
			TimingMismatch: &fleetview.TimingMismatch{File: lease.RowTiming{LeaseTTL: ttl}, Row: lease.RowTiming{LeaseTTL: 30 * ttl}}},
			{Session: "<script>alert(1)</script>", Status: fleetview.Unowned, ServiceLevel: "none", LiveEligible: []string{}}}}
	code, body := get(t, source{node: "node-a", fleet: st, local: local})
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, bad := range []string{"<script", "<link", "src=", "http://", "https://", "<b>x</b>"} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	for _, want := range []string{`data-node="node-a" data-state="live" data-draining="false" data-held="1"`,
		`data-draining="true"`, "lease_ttl 2s here, 60s on the row", `data-epoch="7"`, "pinned to node-a", "no live node",
		fmt.Sprintf(`<meta http-equiv="refresh" content="%d">`, int(Refresh/time.Second))} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
}
