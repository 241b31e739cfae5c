package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// scaleNodes and manySessions shape BenchmarkStandbyScale: three nodes
// with the same 1,000 sessions.
const (
	scaleNodes  = 3
	scaleWindow = 30 * time.Second
)

// nodeEnv names the environment variable that turns this test binary into
// one bench node (runBenchNode) instead of running tests.
const nodeEnv = "LEASEBRIDGE_BENCH_NODE"

// clusteredLease is the lease configuration of oneSession: the clustered
// profile (lease_ttl 45s, renew_interval 10s, acquire_poll_interval 5s).
func clusteredLease(tb testing.TB) lease.Config {
	cfg, err := routes.Parse("one.yaml", []byte(oneSession))
	if err != nil {
		tb.Fatal(err)
	}
	return lease.ConfigFromReport(admit(tb, cfg)[0])
}

// runBenchNode is a bench node process: spec is "endpoint prefix node
// sessions mode" (mode "bulk": standbys share a lease.RowSource; "single":
// each reads its own row). It runs a lease.Manager per session against
// etcd and prints "owners N" whenever the number it owns changes, until
// SIGTERM (it stops without releasing, as a crash would).
func runBenchNode(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 5 {
		return fmt.Errorf("bench node: %s=%q: want endpoint, prefix, node, sessions, mode", nodeEnv, spec)
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return fmt.Errorf("bench node: sessions %q: %w", f[3], err)
	}
	rc, err := routes.Parse("one.yaml", []byte(oneSession))
	if err != nil {
		return err
	}
	reps, errs := preflight.Admit(rc, false)
	if len(errs) > 0 {
		return errs
	}
	cfg := lease.ConfigFromReport(reps[0])
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: []string{f[0]}, DialTimeout: 5 * time.Second, KeyPrefix: f[1], CallTimeout: cfg.RenewCallTimeout})
	if err != nil {
		return err
	}
	defer st.Close()
	var rows *lease.RowSource
	if f[4] == "bulk" {
		if rows, err = lease.NewRowSource(lease.RowSourceOptions{Store: st}); err != nil {
			return err
		}
	}
	id := lease.NewIdentity(f[2])
	mgrs := make([]*lease.Manager, n)
	for i := range mgrs {
		if mgrs[i], err = lease.NewManager(lease.Options{Store: st, Key: fmt.Sprintf("s%04d", i), Identity: id, Config: cfg, Rows: rows}); err != nil {
			return err
		}
		go func() { _ = mgrs[i].Run(ctx) }()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := -1
	for {
		select {
		case <-sig:
			return nil
		case <-tick.C:
		}
		owned := 0
		for _, m := range mgrs {
			if m.Owner() != nil {
				owned++
			}
		}
		if owned != last {
			fmt.Printf("owners %d\n", owned)
			last = owned
		}
	}
}

// benchNode is a running bench node process.
type benchNode struct {
	cmd    *exec.Cmd
	owners atomic.Int64
	ticks  atomic.Int64 // renew rounds of a batched renew bench node
	// heap and stack are a renew bench node's last memory report (bytes
	// in use), memSeq counts the reports.
	heap, stack, memSeq atomic.Int64
	stop                func() // ends the process, once
	done                chan error
}

func startBenchNode(tb testing.TB, endpoint, prefix, name, mode string) *benchNode {
	tb.Helper()
	n, _ := startNodeProcess(tb, fmt.Sprintf("%s=%s %s %s %d %s", nodeEnv, endpoint, prefix, name, manySessions, mode))
	return n
}

func (n *benchNode) cpu(tb testing.TB) time.Duration {
	c, _, _, err := procStat(n.cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkStandbyScale runs three bench node processes with the same
// 1,000 sessions on the clustered profile against one etcd member: the
// first owns every session, the other two stand by. Over scaleWindow it
// measures the etcd reads the standbys make (every Range: the owner only
// writes) and each node's CPU, once with the standbys reading in bulk
// (lease.RowSource, as failover sets it up) and once, the baseline, with
// every standby reading its own row at every poll. It runs once whatever
// b.N is.
func BenchmarkStandbyScale(b *testing.B) {
	etcd := testetcd.StartBinary(b, 1)
	for _, mode := range []string{"bulk", "single"} {
		b.Run(mode, func(b *testing.B) { standbyScale(b, etcd.Endpoints()[0], mode) })
	}
}

func standbyScale(b *testing.B, endpoint, mode string) {
	cfg := clusteredLease(b)
	prefix := fmt.Sprintf("/bench/%s/%d/", mode, time.Now().UnixNano())
	nodes := []*benchNode{startBenchNode(b, endpoint, prefix, "n1", mode)}
	waitOwners(b, nodes[0], manySessions)
	for i := 2; i <= scaleNodes; i++ {
		nodes = append(nodes, startBenchNode(b, endpoint, prefix, fmt.Sprintf("n%d", i), mode))
	}
	// Let the standbys start and make their first polls.
	time.Sleep(2 * cfg.AcquirePollInterval)
	for _, n := range nodes[1:] {
		if got := n.owners.Load(); got != 0 {
			b.Fatalf("a standby node owns %d sessions", got)
		}
	}
	metrics := endpoint + "/metrics"
	kv := func(method string) float64 {
		v, err := metricSum(metrics, "grpc_server_handled_total", `grpc_method="`+method+`"`, `grpc_service="etcdserverpb.KV"`)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	cpu0 := make([]time.Duration, len(nodes))
	for i, n := range nodes {
		cpu0[i] = n.cpu(b)
	}
	r0, t0 := kv("Range"), time.Now()
	time.Sleep(scaleWindow)
	r1, el := kv("Range"), time.Since(t0)
	pct := func(i int) float64 { return 100 * (nodes[i].cpu(b) - cpu0[i]).Seconds() / el.Seconds() }
	if got := nodes[0].owners.Load(); got != manySessions {
		b.Fatalf("the owner node owns %d of %d sessions after the window", got, manySessions)
	}
	rps := (r1 - r0) / el.Seconds()
	m := map[string]float64{
		"sessions":                manySessions,
		"nodes":                   scaleNodes,
		"poll_s":                  cfg.AcquirePollInterval.Seconds(),
		"window_s":                el.Seconds(),
		"standby_reads_per_s":     rps,
		"standby_reads_per_poll":  rps * cfg.AcquirePollInterval.Seconds(),
		"owner_cpu_pct":           pct(0),
		"standby_cpu_pct":         (pct(1) + pct(2)) / 2,
		"standby_cpu_pct_highest": max(pct(1), pct(2)),
	}
	for k, v := range m {
		b.ReportMetric(v, k)
	}
	record(b, "scale/3x1000/"+mode, result{N: 1, Metrics: m})
}

func waitOwners(tb testing.TB, n *benchNode, want int64) {
	tb.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for n.owners.Load() != want {
		select {
		case err := <-n.done:
			tb.Fatalf("bench node exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("bench node owns %d of %d sessions after 3 minutes", n.owners.Load(), want)
		}
	}
}
