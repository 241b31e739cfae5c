package fleetpage_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/httpapi/fleetpage"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/fleettest"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// A running supervisor whose lease store keeps no fleet rows (no
// Options.Fleet, as for a store without them) serves a page that says so
// and lists its own sessions with what it measured, instead of failing.
func TestPageWithoutFleetRows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := fleettest.Start(t)
	cfg, err := routes.Parse("nofleet.yaml", []byte(f.Config("node-a", "127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	reports, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	store, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: f.Etcd.Endpoints(), DialTimeout: time.Second, KeyPrefix: cfg.LeaseStore.KeyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sv, err := failover.New(failover.Options{Config: cfg, Reports: reports, Store: store, Identity: lease.NewIdentity("node-a"),
		Node: "node-a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: failover.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(fleetpage.Handler(sv))
	defer srv.Close()
	for deadline := time.Now().Add(2*f.Budget(t) + 30*time.Second); ; time.Sleep(20 * time.Millisecond) {
		all := true
		for _, s := range sv.Status() {
			all = all && fleettest.Owning(s)
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving: %+v", sv.Status())
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	for _, want := range []string{`id="no-fleet"`, "keeps no fleet rows", `data-session="plc"`, `data-session="uplink"`,
		"1 of 1 up", "cause initial", "<td>serving</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
}
