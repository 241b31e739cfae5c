package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// renewNodeEnv names the environment variable that turns this test binary
// into one renew bench node (runRenewNode).
const renewNodeEnv = "LEASEBRIDGE_BENCH_RENEW_NODE"

// renewSession is oneSession at a faster cadence (renew_interval 2s), so
// that a 20 s window holds ten renew rounds.
const renewSession = `deployment_mode: clustered
node: n
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {broker_health_step_down: "off", lease_ttl: 12s, renew_interval: 2s, lease_renew_jitter: 200ms, renew_call_timeout: 1s, acquire_poll_interval: 3s}
brokers:
  local: {url: "tcp://127.0.0.1:1883"}
devices:
  d: {kind: modbus_tcp, address: "127.0.0.1:502", groups: [{name: g, tags: [{name: t, register: holding, address: 0, type: uint16}]}]}
routes:
  - {name: r, session: s, kind: poll, device: d, broker: local}
`

// renewRounds is how many renew rounds one measurement window lasts.
const renewRounds = 10

func renewLease() (lease.Config, error) {
	rc, err := routes.Parse("renew.yaml", []byte(renewSession))
	if err != nil {
		return lease.Config{}, err
	}
	reps, errs := preflight.Admit(rc, false)
	if len(errs) > 0 {
		return lease.Config{}, errs
	}
	return lease.ConfigFromReport(reps[0]), nil
}

// runRenewNode is a renew bench node process: spec is "endpoint prefix
// node sessions from to mode". It runs a lease.Manager for sessions
// [from, to) at once and, when a line "rest" arrives on stdin, for every
// other session; mode "batch" gives them a lease.Renewer, "single" renews
// per session. Standbys read in bulk in both modes, as failover sets them
// up. It prints "owners N" whenever the number it owns changes, until
// SIGTERM.
func runRenewNode(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 7 {
		return fmt.Errorf("renew node: %s=%q: want endpoint, prefix, node, sessions, from, to, mode", renewNodeEnv, spec)
	}
	var n, from, to int
	for i, p := range []*int{&n, &from, &to} {
		v, err := strconv.Atoi(f[3+i])
		if err != nil {
			return fmt.Errorf("renew node: %q: %w", f[3+i], err)
		}
		*p = v
	}
	cfg, err := renewLease()
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: []string{f[0]}, DialTimeout: 5 * time.Second, KeyPrefix: f[1], CallTimeout: cfg.RenewCallTimeout})
	if err != nil {
		return err
	}
	defer st.Close()
	rows, err := lease.NewRowSource(lease.RowSourceOptions{Store: st})
	if err != nil {
		return err
	}
	var ren *lease.Renewer
	if f[6] == "batch" {
		if ren, err = lease.NewRenewer(lease.RenewerOptions{Store: st}); err != nil {
			return err
		}
	}
	rn := &renewNode{}
	id := lease.NewIdentity(f[2])
	start := func(i int) error {
		m, err := lease.NewManager(lease.Options{Store: st, Key: fmt.Sprintf("s%04d", i), Identity: id, Config: cfg, Rows: rows, Renewer: ren})
		if err != nil {
			return err
		}
		rn.add(m)
		go func() { _ = m.Run(ctx) }()
		return nil
	}
	for i := from; i < to; i++ {
		if err := start(i); err != nil {
			return err
		}
	}
	rest := make(chan error, 1)
	go func() { rest <- rn.startRest(os.Stdin, n, from, to, start) }()
	return rn.report(rest, ren)
}

// renewNode is the managers of one renew bench node.
type renewNode struct {
	mu   sync.Mutex
	mgrs []*lease.Manager
}

func (rn *renewNode) add(m *lease.Manager) {
	rn.mu.Lock()
	rn.mgrs = append(rn.mgrs, m)
	rn.mu.Unlock()
}

// startRest starts the sessions outside [from, to) when "rest" arrives,
// and answers "mem" with its Go heap and stacks in use.
func (rn *renewNode) startRest(in io.Reader, n, from, to int, start func(int) error) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() == "mem" {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Printf("mem %d %d\n", ms.HeapInuse, ms.StackInuse)
			continue
		}
		if sc.Text() != "rest" {
			continue
		}
		for i := range n {
			if i < from || i >= to {
				if err := start(i); err != nil {
					return err
				}
			}
		}
		fmt.Println("rest started")
	}
	return nil
}

// report prints "owners N" and, with a renewer, "ticks N" at each change
// until SIGTERM or a failed start.
func (rn *renewNode) report(rest <-chan error, ren *lease.Renewer) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last, lastTicks := -1, int64(-1)
	for {
		select {
		case <-sig:
			return nil
		case err := <-rest:
			if err != nil {
				return err
			}
			rest = nil
		case <-tick.C:
		}
		owned := 0
		rn.mu.Lock()
		for _, m := range rn.mgrs {
			if m.Owner() != nil {
				owned++
			}
		}
		rn.mu.Unlock()
		if owned != last {
			fmt.Printf("owners %d\n", owned)
			last = owned
		}
		if ren != nil && ren.Ticks() != lastTicks {
			lastTicks = ren.Ticks()
			fmt.Printf("ticks %d\n", lastTicks)
		}
	}
}

// startRenewNode starts a renew bench node owning sessions [from, to).
func startRenewNode(tb testing.TB, endpoint, prefix, name string, from, to int, mode string) (*benchNode, io.WriteCloser) {
	tb.Helper()
	n, stdin := startNodeProcess(tb, fmt.Sprintf("%s=%s %s %s %d %d %d %s", renewNodeEnv, endpoint, prefix, name, manySessions, from, to, mode))
	return n, stdin
}

// renewLayouts are the fleets BenchmarkRenewBatching measures: nodes
// sharing the same 1,000 sessions, the owned rows split evenly.
var renewLayouts = []struct {
	name  string
	nodes int
}{{"1x1000", 1}, {"3x1000", 3}}

// renewPairs counts each layout's repetitions, to alternate which of
// the pair goes first.
var renewPairs = map[string]int{}

// BenchmarkRenewBatching measures what renewing costs an owner node, with
// renews batched (a lease.Renewer per node) and, as the baseline in the
// same run, per session: etcd Txn requests per node and renew round (the
// member's grpc_server_handled_total), the owner nodes' CPU, RSS, heap and
// stacks, and the machine's load average beside them. Each repetition of
// a layout measures one pair, baseline and batched, alternating which goes
// first, so load that comes and goes hits both alike. The etcd member is
// embedded in this process; the nodes are this test binary re-executed.
// It runs once whatever b.N is.
func BenchmarkRenewBatching(b *testing.B) {
	etcd := testetcd.StartEmbedded(b, 1)
	for _, layout := range renewLayouts {
		b.Run(layout.name, func(b *testing.B) {
			renewPairs[layout.name]++
			modes := []string{"single", "batch"}
			if renewPairs[layout.name]%2 == 0 {
				modes = []string{"batch", "single"}
			}
			for _, mode := range modes {
				renewBatching(b, etcd.Endpoints()[0], layout.name, layout.nodes, mode)
			}
		})
	}
}

func renewBatching(b *testing.B, endpoint, layout string, nodes int, mode string) {
	cfg, err := renewLease()
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("/bench/renew/%s/%d/", mode, time.Now().UnixNano())
	var ns []*benchNode
	var ins []io.WriteCloser
	share := manySessions / nodes
	for i := range nodes {
		from, to := i*share, (i+1)*share
		if i == nodes-1 {
			to = manySessions
		}
		n, in := startRenewNode(b, endpoint, prefix, fmt.Sprintf("n%d", i+1), from, to, mode)
		waitOwners(b, n, int64(to-from))
		ns, ins = append(ns, n), append(ins, in)
	}
	for _, in := range ins {
		if _, err := io.WriteString(in, "rest\n"); err != nil {
			b.Fatal(err)
		}
	}
	m := measureRenew(b, endpoint, cfg, ns, ins)
	for _, n := range ns {
		n.stop() // before the other mode of the pair starts
	}
	m["nodes"], m["sessions"] = float64(nodes), manySessions
	m["goal_txn_per_node_round"] = math.Ceil(float64(share) / float64(etcdstore.DefaultMaxTxnOps))
	for _, k := range []string{"txn_per_node_round", "owner_cpu_pct", "owner_rss_MB", "load1"} {
		b.ReportMetric(m[k], k)
	}
	record(b, "renew/"+layout+"/"+mode, result{N: 1, Metrics: m})
}

// measureRenew waits one renew round for the standbys to start, then
// measures renewRounds renew_intervals: etcd Txn per node per renew round,
// Range per renew_interval, and the nodes' mean CPU and RSS.
func measureRenew(b *testing.B, endpoint string, cfg lease.Config, ns []*benchNode, ins []io.WriteCloser) map[string]float64 {
	kv := func(method string) float64 {
		v, err := metricSum(endpoint+"/metrics", "grpc_server_handled_total", `grpc_method="`+method+`"`, `grpc_service="etcdserverpb.KV"`)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	owned := make([]int64, len(ns))
	for i, n := range ns {
		owned[i] = n.owners.Load()
	}
	time.Sleep(cfg.RenewInterval + cfg.RenewJitter) // the standbys' start-up reads and the first ticks
	cpu0 := make([]time.Duration, len(ns))
	for i, n := range ns {
		cpu0[i] = n.cpu(b)
	}
	load0 := loadAvg(b)
	ticks := func() (sum int64) {
		for _, n := range ns {
			sum += n.ticks.Load()
		}
		return sum
	}
	txn0, range0, ticks0, t0 := kv("Txn"), kv("Range"), ticks(), time.Now()
	time.Sleep(renewRounds * cfg.RenewInterval)
	txn1, range1, ticks1, el := kv("Txn"), kv("Range"), ticks(), time.Since(t0)
	heap, stack := askMem(b, ns, ins)
	var cpu time.Duration
	var rss int64
	for i, n := range ns {
		c, r, _, err := procStat(n.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		cpu, rss = cpu+c-cpu0[i], rss+r
		if got := n.owners.Load(); got != owned[i] {
			b.Fatalf("node %d owns %d sessions after the window, %d before", i+1, got, owned[i])
		}
	}
	k := float64(len(ns))
	rounds := el.Seconds() / cfg.RenewInterval.Seconds()
	// A node's renew round: per session, a renew_interval (each session
	// renews every renew_interval on average); batched, one tick of its
	// renewer, counted by the node, so that how many ticks fall in the
	// window does not move the figure.
	nodeRounds := k * rounds
	if ticks1 > ticks0 {
		nodeRounds = float64(ticks1 - ticks0)
	}
	return map[string]float64{
		"window_s":           el.Seconds(),
		"renew_interval_s":   cfg.RenewInterval.Seconds(),
		"node_rounds":        nodeRounds,
		"txn_per_round":      (txn1 - txn0) / rounds,
		"txn_per_node_round": (txn1 - txn0) / nodeRounds,
		"range_per_round":    (range1 - range0) / rounds,
		"owner_cpu_pct":      100 * cpu.Seconds() / el.Seconds() / k,
		"owner_rss_MB":       float64(rss) / (1 << 20) / k,
		"owner_heap_MB":      heap / k,
		"owner_stack_MB":     stack / k,
		"load1":              (load0 + loadAvg(b)) / 2,
	}
}

// askMem asks every node for its Go heap and stacks in use and returns
// their sums, in MB.
func askMem(b *testing.B, ns []*benchNode, ins []io.WriteCloser) (heap, stack float64) {
	for i, n := range ns {
		seq := n.memSeq.Load()
		if _, err := io.WriteString(ins[i], "mem\n"); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for n.memSeq.Load() == seq {
			if time.Now().After(deadline) {
				b.Fatalf("node %d did not report its memory within 10s", i+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
		heap += float64(n.heap.Load()) / (1 << 20)
		stack += float64(n.stack.Load()) / (1 << 20)
	}
	return heap, stack
}

// loadAvg is the machine's one-minute load average.
func loadAvg(tb testing.TB) float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		tb.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// startNodeProcess re-executes this test binary with env set, as a bench
// node, and follows its "owners N" lines; the returned writer is its
// stdin.
func startNodeProcess(tb testing.TB, env string) (*benchNode, io.WriteCloser) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	n := &benchNode{cmd: cmd, done: make(chan error, 1)}
	n.stop = sync.OnceFunc(func() {
		_ = in.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-n.done
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "owners "); ok {
				k, _ := strconv.ParseInt(v, 10, 64)
				n.owners.Store(k)
			}
			if v, ok := strings.CutPrefix(sc.Text(), "ticks "); ok {
				k, _ := strconv.ParseInt(v, 10, 64)
				n.ticks.Store(k)
			}
			if v, ok := strings.CutPrefix(sc.Text(), "mem "); ok {
				var h, st int64
				_, _ = fmt.Sscan(v, &h, &st)
				n.heap.Store(h)
				n.stack.Store(st)
				n.memSeq.Add(1)
			}
		}
		n.done <- cmd.Wait()
	}()
	tb.Cleanup(n.stop)
	return n, in
}

// renewSection writes BenchmarkRenewBatching's results, if it ran.
func renewSection(rs resultSet, w func(string, ...any)) {
	first, n := rs.metrics("renew/1x1000/batch")
	if n == 0 {
		return
	}
	w("## Owners: renewals batched, 1 and 3 nodes x 1,000 sessions\n\n")
	w("`BenchmarkRenewBatching` (`bench/renew_test.go`) starts node processes (this test binary\n")
	w("re-executed as a node) with the same %.0f sessions, a `lease.Manager` each (renew_interval %.0fs,\n", first["sessions"], first["renew_interval_s"])
	w("lease_renew_jitter 200ms, renew_call_timeout 1s), against one etcd member embedded in the benchmark\n")
	w("process. The rows are split evenly: each node first owns its share, then stands by for the others'\n")
	w("(reading in bulk). Over %.0f renew intervals it counts the member's Txn requests\n", first["window_s"]/first["renew_interval_s"])
	w("(`grpc_server_handled_total`; only the owners' renewals write) per node and renew round (batched:\n")
	w("one tick of the node's renewer, counted by the node; per session: one renew_interval, each session's\n")
	w("mean renew period), and each node's CPU (user + system from `/proc`), its RSS and its Go heap and\n")
	w("stacks in use at the end.\n")
	w("**batched**: each node's owners share one\n")
	w("`lease.Renewer`, as `failover` sets it up (one Txn per 127 rows per tick); **per session** (the\n")
	w("baseline in the same run): each owner renews its own row. Baseline and batched run as a pair per\n")
	w("repetition, alternating which goes first, and the machine's one-minute load average is recorded\n")
	w("beside each. The goal is at most ceil(owned / 128) writes per node per round; failover's store\n")
	w("health probe adds one count-only Range per heartbeat, no write.\n\n")
	w("| fleet | renewing | etcd Txn per node per renew round (median of %d) | goal | owner CPU (%% of one core, per node) | owner RSS per node | Go heap / stacks in use per node | load average |\n", n)
	w("|---|---|---|---|---|---|---|---|\n")
	for _, layout := range renewLayouts {
		bat, _ := rs.metrics("renew/" + layout.name + "/batch")
		one, _ := rs.metrics("renew/" + layout.name + "/single")
		label := fmt.Sprintf("%d node%s x %.0f", layout.nodes, map[bool]string{true: "s"}[layout.nodes > 1], bat["sessions"])
		w("| %s | per session (baseline) | %.1f | | %.2f %% | %.1f MB | %.1f MB / %.1f MB | %.1f |\n", label, one["txn_per_node_round"], one["owner_cpu_pct"], one["owner_rss_MB"],
			one["owner_heap_MB"], one["owner_stack_MB"], one["load1"])
		met := "met"
		if bat["txn_per_node_round"] > bat["goal_txn_per_node_round"] {
			met = "not met"
		}
		w("| %s | batched | %.1f | <= %.0f: %s | %.2f %% | %.1f MB | %.1f MB / %.1f MB | %.1f |\n", label, bat["txn_per_node_round"], bat["goal_txn_per_node_round"], met,
			bat["owner_cpu_pct"], bat["owner_rss_MB"], bat["owner_heap_MB"], bat["owner_stack_MB"], bat["load1"])
	}
	w("\nReproduce this section alone (written to a temporary file whose path the run prints):\n\n")
	w("```sh\ngo test -run '^$' -bench RenewBatching -benchtime 1x -count 3 -timeout 30m ./bench/\n```\n\n")
}
