package kubestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/testkube"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/kubestore"
)

// benchSessions is the session count of one node in the benchmark.
const benchSessions = 100

// benchTiming is an admitted cadence between the lab's and the clustered
// profile's, so that 100 sessions keep a loaded test machine's API server
// busy without starving it.
var benchTiming = admission.Timing{
	LeaseTTL: 10 * time.Second, RenewInterval: 2 * time.Second, RenewJitter: 200 * time.Millisecond,
	RenewCallTimeout: time.Second, AcquirePollInterval: time.Second, StepDownGrace: time.Second, MaxRenewFails: 2,
}

// BenchmarkKubeRequestRates measures what the Kubernetes lease store costs
// the API server, as the API server counts it (apiserver_request_total):
// one node owning 100 sessions (PATCH requests per second), then a second
// node standing by for all of them, once with the bulk read (one LIST per
// poll for the whole node) and once with the per-session baseline (one GET
// per session per poll), in the same run. It runs once whatever b.N is.
func BenchmarkKubeRequestRates(b *testing.B) {
	rep := admission.Evaluate(admission.Inputs{Session: "bench", Timing: benchTiming,
		BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
		Transports:   []admission.Activation{{Name: "bench", Close: 100 * time.Millisecond}}})
	if !rep.Admitted() {
		b.Fatalf("benchmark cadence refused: %v", rep.Refusals)
	}
	cfg := lease.ConfigFromReport(rep)
	api := testkube.Start(b)
	ns := api.Namespace("bench")
	store := func() *kubestore.Store {
		s, err := kubestore.New(kubestore.Config{Namespace: ns, Kubeconfig: api.Kubeconfig(testkube.AdminToken, "", ns), KeyPrefix: "/bench/"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	owners := startManagers(b, store(), cfg, "owner", false)
	waitOwners(b, owners)
	window := 10 * benchTiming.RenewInterval
	own := measure(b, api, window)
	polls := window.Seconds() / benchTiming.AcquirePollInterval.Seconds()
	bulkStore := store()
	stopBulk := startStandbys(b, bulkStore, cfg, true)
	bulk := measure(b, api, window)
	stopBulk()
	stopEach := startStandbys(b, store(), cfg, false)
	each := measure(b, api, window)
	stopEach()
	ownerRate := own["PATCH"] / window.Seconds()
	bulkPerPoll := (bulk["GET"] + bulk["LIST"]) / polls
	eachPerPoll := (each["GET"] + each["LIST"]) / polls
	b.ReportMetric(ownerRate, "owner_requests/s")
	b.ReportMetric(bulkPerPoll, "bulk_standby_reads/poll")
	b.ReportMetric(eachPerPoll, "per_session_standby_reads/poll")
	b.Logf("1 node x %d sessions, renew_interval %s: %.1f PATCH/s (%.1f requests/s of every verb); "+
		"a standby node, acquire_poll_interval %s: %.1f reads per poll in bulk (LIST %.0f, GET %.0f) against %.1f one per session (GET %.0f, LIST %.0f)",
		benchSessions, benchTiming.RenewInterval, ownerRate, sum(own)/window.Seconds(), benchTiming.AcquirePollInterval,
		bulkPerPoll, bulk["LIST"], bulk["GET"], eachPerPoll, each["GET"], each["LIST"])
}

func sum(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// measure is the API server's lease requests by verb over window.
func measure(b *testing.B, api *testkube.APIServer, window time.Duration) map[string]float64 {
	b.Helper()
	ctx := context.Background()
	before, err := api.LeaseRequests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(window)
	after, err := api.LeaseRequests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range before {
		after[k] -= v
	}
	return after
}

// startManagers runs one manager per session on s, with a bulk row source
// when bulk is set, until the benchmark ends.
func startManagers(b *testing.B, s *kubestore.Store, cfg lease.Config, node string, bulk bool) []*lease.Manager {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return runManagers(b, ctx, s, cfg, node, bulk)
}

func runManagers(b *testing.B, ctx context.Context, s *kubestore.Store, cfg lease.Config, node string, bulk bool) []*lease.Manager {
	var rows *lease.RowSource
	if bulk {
		var err error
		if rows, err = lease.NewRowSource(lease.RowSourceOptions{Store: s}); err != nil {
			b.Fatal(err)
		}
	}
	id := lease.NewIdentity(node)
	mgrs := make([]*lease.Manager, benchSessions)
	for i := range mgrs {
		m, err := lease.NewManager(lease.Options{Store: s, Key: fmt.Sprintf("s%03d", i), Identity: id, Config: cfg, Rows: rows})
		if err != nil {
			b.Fatal(err)
		}
		mgrs[i] = m
		go func() { _ = m.Run(ctx) }()
	}
	return mgrs
}

// startStandbys runs a standby node for every session and returns what
// stops it, once the standbys have polled for a while.
func startStandbys(b *testing.B, s *kubestore.Store, cfg lease.Config, bulk bool) func() {
	ctx, cancel := context.WithCancel(context.Background())
	mgrs := runManagers(b, ctx, s, cfg, "standby", bulk)
	time.Sleep(2 * benchTiming.AcquirePollInterval)
	for _, m := range mgrs {
		if m.Owner() != nil {
			b.Fatalf("a standby took a session over from a live owner")
		}
	}
	return cancel
}

// waitOwners waits until every manager owns its session.
func waitOwners(b *testing.B, mgrs []*lease.Manager) {
	deadline := time.Now().Add(time.Minute)
	for _, m := range mgrs {
		for m.Owner() == nil {
			if time.Now().After(deadline) {
				b.Fatal("the owner node did not take every session within a minute")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
