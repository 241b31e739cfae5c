package bench

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/failover"
)

// result is one benchmark's final measurement (the run with the largest
// b.N).
type result struct {
	N       int
	NsPerOp float64
	Metrics map[string]float64
	// Func is the benchmark function that measured it, such as
	// BenchmarkAdmitLarge; Run is the run: date, Go version, platform and
	// CPUs.
	Func, Run string
}

// resultSet holds, per benchmark, the final measurement of each
// repetition (-count): a benchmark function's last call has the largest
// b.N.
type resultSet map[string][]result

var (
	resultsMu sync.Mutex
	runs      = resultSet{}
	// thisRun names the current run in the results it records.
	thisRun = fmt.Sprintf("%s %s %s/%s %d CPUs", time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
)

// record keeps r as the current repetition's result of name. Every call
// of a benchmark function with b.N == 1 starts a new repetition (the
// testing package starts each -count repetition with b.N = 1), except for
// the benchmarks that run once whatever b.N is, where every call is one.
// Its numbers are kept as the page prints them (ns/op whole, metrics to 4
// significant digits), so the page can be rendered again from its raw
// results.
func record(b *testing.B, name string, r result) {
	r.Func, _, _ = strings.Cut(b.Name(), "/")
	r.Run = thisRun
	r.NsPerOp = math.Round(r.NsPerOp)
	for k, v := range r.Metrics {
		r.Metrics[k], _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	rs := runs[name]
	if len(rs) == 0 || r.N == 1 || r.N < rs[len(rs)-1].N {
		runs[name] = append(rs, r)
		return
	}
	rs[len(rs)-1] = r
}

// median is the repetition of name whose NsPerOp is the median; n is
// the number of repetitions.
func (s resultSet) median(name string) (result, int, bool) {
	rs := append([]result(nil), s[name]...)
	if len(rs) == 0 {
		return result{}, 0, false
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].NsPerOp < rs[j].NsPerOp })
	return rs[len(rs)/2], len(rs), true
}

// medianBy is the repetition of name whose metric is the median; n is
// the number of repetitions.
func (s resultSet) medianBy(name, metric string) (result, int, bool) {
	rs := append([]result(nil), s[name]...)
	if len(rs) == 0 {
		return result{}, 0, false
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Metrics[metric] < rs[j].Metrics[metric] })
	return rs[len(rs)/2], len(rs), true
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		// A bench node process started by BenchmarkStandbyScale.
		if err := runBenchNode(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(renewNodeEnv); spec != "" {
		// A renew bench node started by BenchmarkRenewBatching.
		if err := runRenewNode(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	resultsMu.Lock()
	n := len(runs)
	resultsMu.Unlock()
	// With LEASEBRIDGE_WRITE_DOCS=1 and no benchmark run, the page is
	// rendered again from its raw results alone.
	if n > 0 || os.Getenv("LEASEBRIDGE_WRITE_DOCS") == "1" {
		if err := writePage(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// pagePath is the benchmarks page, relative to this package.
var pagePath = filepath.Join("..", "docs", "benchmarks.md")

// writePage merges this run's results into the page's (mergeResults) and
// writes the page: to docs/benchmarks.md with LEASEBRIDGE_WRITE_DOCS=1,
// else to a temporary file whose path it prints.
func writePage() error {
	page, err := os.ReadFile(pagePath)
	if err != nil {
		return err
	}
	old, err := parseRawResults(string(page))
	if err != nil {
		return fmt.Errorf("%s: %w", pagePath, err)
	}
	resultsMu.Lock()
	merged := mergeResults(old, runs)
	resultsMu.Unlock()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("benchmarks-%d.md", os.Getpid()))
	if os.Getenv("LEASEBRIDGE_WRITE_DOCS") == "1" {
		path = pagePath
	}
	if err := os.WriteFile(path, []byte(benchMarkdown(merged)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: results written to %s\n", path)
	return nil
}

// mergeResults is fresh plus every result of old whose benchmark function
// did not run in fresh: a run of some benchmarks replaces their rows (also
// rows of names they no longer record) and keeps the others.
func mergeResults(old, fresh resultSet) resultSet {
	ran := map[string]bool{}
	out := resultSet{}
	for name, rs := range fresh {
		out[name] = rs
		for _, r := range rs {
			ran[r.Func] = true
		}
	}
	for name, rs := range old {
		for _, r := range rs {
			if !ran[r.Func] {
				out[name] = append(out[name], r)
			}
		}
	}
	return out
}

// rawHeader starts the page's raw results table, which parseRawResults
// reads back.
const rawHeader = "| benchmark | rep | b.N | ns/op | metrics | function | run |"

// parseRawResults reads the raw results table of a page benchMarkdown
// wrote: every repetition of every benchmark.
func parseRawResults(page string) (resultSet, error) {
	_, table, ok := strings.Cut(page, rawHeader+"\n|---|---|---|---|---|---|---|\n")
	if !ok {
		return nil, fmt.Errorf("no raw results table (%s)", rawHeader)
	}
	out := resultSet{}
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 9 {
			return nil, fmt.Errorf("raw result %q: want 7 cells", line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		r := result{Metrics: map[string]float64{}, Func: cells[6], Run: cells[7]}
		var err error
		if r.N, err = strconv.Atoi(cells[3]); err != nil {
			return nil, fmt.Errorf("raw result %q: b.N: %w", line, err)
		}
		if r.NsPerOp, err = strconv.ParseFloat(cells[4], 64); err != nil {
			return nil, fmt.Errorf("raw result %q: ns/op: %w", line, err)
		}
		for _, kv := range strings.Fields(cells[5]) {
			k, v, _ := strings.Cut(kv, "=")
			if r.Metrics[k], err = strconv.ParseFloat(v, 64); err != nil {
				return nil, fmt.Errorf("raw result %q: metric %s: %w", line, k, err)
			}
		}
		out[cells[1]] = append(out[cells[1]], r)
	}
	return out, nil
}

// reproduce is the command that regenerates docs/benchmarks.md.
const reproduce = "LEASEBRIDGE_WRITE_DOCS=1 go test -run '^$' -bench . -benchtime 2s -count 3 -timeout 30m ./bench/"

// metrics is, per metric, the median over the repetitions of name; n is
// their number.
func (s resultSet) metrics(name string) (map[string]float64, int) {
	rs := s[name]
	out := map[string]float64{}
	if len(rs) == 0 {
		return out, 0
	}
	for k := range rs[0].Metrics {
		var vs []float64
		for _, r := range rs {
			vs = append(vs, r.Metrics[k])
		}
		sort.Float64s(vs)
		out[k] = vs[len(vs)/2]
	}
	return out, len(rs)
}

func ms(ns float64) string { return fmt.Sprintf("%.3f ms", ns/1e6) }

// benchMarkdown renders the page from rs alone, so that the page can be
// rendered again from its raw results (TestBenchmarksPageUpToDate).
func benchMarkdown(rs resultSet) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("<!-- Generated by `%s` from measured data. Do not edit. -->\n", reproduce)
	w("# Benchmarks\n\n")
	w("Each benchmark runs its baseline in the same `go test -bench` run, against the same peers.\n")
	w("Numbers are from runs on machines shared with other test runs; each figure is the median of its\n")
	w("run's repetitions (`-count`), and single repetitions differ by tens of percent on such a machine.\n")
	w("The runs (the raw results at the end name each row's):\n\n")
	for _, run := range runsOf(rs) {
		w("- %s: %s\n", run.name, strings.Join(run.funcs, ", "))
	}
	w("\nReproduce (writes this page):\n\n")
	w("```sh\n%s\n```\n\n", reproduce)
	w("A run replaces the rows of the benchmark functions it ran and keeps the page's other rows, so\n")
	w("one section can be measured again alone, such as `LEASEBRIDGE_WRITE_DOCS=1 go test -run '^$'\n")
	w("-bench AdmitLarge -benchtime 2s -count 3 ./bench/`. Without `LEASEBRIDGE_WRITE_DOCS=1` the page\n")
	w("is written to a temporary file whose path the run prints; `LEASEBRIDGE_WRITE_DOCS=1 go test -run\n")
	w("'^$' ./bench/` renders the page again from its raw results without measuring. `go test ./...`\n")
	w("runs two tests of this package: `TestLargeConfigAdmitted` checks that the generated configuration\n")
	w("is what the benchmark claims and is admitted, and `TestBenchmarksPageUpToDate` renders this page\n")
	w("again from its raw results and fails when the page was edited by hand.\n\n")

	names := make([]string, 0, len(rs))
	for k := range rs {
		names = append(names, k)
	}
	sort.Strings(names)

	dataplaneSection(rs, w)

	admitSection(rs, w)

	if m, n := rs.metrics("sessions/1000"); n > 0 {
		w("## One process holding 1,000 sessions\n\n")
		w("`BenchmarkThousandSessions` (`bench/sessions_test.go`) runs one `leasebridge run` process with\n")
		w("%.0f sessions on the clustered profile (lease_ttl 45s, renew_interval %.0fs, jitter 1s), each a\n", m["sessions"], m["renew_interval_s"])
		w("Modbus TCP device polled every 10s (publish on change) and its own MQTT connection, against one\n")
		w("Debian etcd 3.4 member and one mosquitto. Once every session is at ServiceLevelFull\n")
		w("(%.1fs after start) and one more renew interval has passed, it measures the idle process for\n", m["all_full_s"])
		w("%.0fs. etcd requests are the member's `grpc_server_handled_total` for `etcdserverpb.KV`; a renew\n", m["window_s"])
		w("round is one renew_interval.\n\n")
		w("| measurement (median of %d) | value | goal |\n|---|---|---|\n", n)
		rssMet := "< 140 MB: met"
		if m["rss_MB"] >= 140 || m["peak_rss_MB"] >= 140 {
			rssMet = "< 140 MB: not met"
		}
		w("| RSS at idle (`GOGC=%d`, what `leasebridge run` sets) | %.1f MB | %s |\n", failover.GCPercent, m["rss_MB"], rssMet)
		w("| peak RSS (VmHWM, including the takeover of all sessions) | %.1f MB | |\n", m["peak_rss_MB"])
		w("| of the RSS, the binary's own pages (RssFile) / the rest (heap, stacks, runtime) | %.1f MB / %.1f MB | |\n", m["rss_file_MB"], m["rss_MB"]-m["rss_file_MB"])
		w("| CPU at idle (user + system, %% of one core) | %.2f %% | |\n", m["cpu_idle_pct"])
		w("| goroutines | %.0f (%.1f per session) | |\n", m["goroutines"], m["goroutines"]/m["sessions"])
		w("| Go stacks in use / heap in use | %.1f MB / %.1f MB | |\n", m["stack_inuse_MB"], m["heap_inuse_MB"])
		w("| etcd Txn per renew round | %.0f (%.2f per session) | |\n", m["txn_per_round"], m["txn_per_round"]/m["sessions"])
		w("| etcd Range per renew round | %.0f | |\n", m["range_per_round"])
		w("| etcd KV requests per second | %.1f | |\n", m["etcd_reqs_per_second"])
		if lm, n := rs.metrics("sessions/1000-lease-managers-only"); n > 0 {
			met := "< 1 %: met"
			if lm["cpu_idle_pct"] >= 1 {
				met = "< 1 %: not met"
			}
			w("| CPU at idle of 1,000 `lease.Manager`s alone (in-memory store, `BenchmarkIdleLeaseManagers`) | %.2f %% (%.0f goroutines) | %s |\n",
				lm["cpu_idle_pct"], lm["goroutines"], met)
		}
		if lm, n := rs.metrics("sessions/10-lease-managers-only"); n > 0 {
			w("| baseline in the same run: CPU at idle of 10 `lease.Manager`s alone | %.2f %% (%.0f goroutines) | |\n",
				lm["cpu_idle_pct"], lm["goroutines"])
		}
		for _, gc := range []struct{ name, label string }{{"sessions/1000-gogc50", "`GOGC=50`, run's earlier setting"}, {"sessions/1000-gogc100", "Go's default `GOGC=100`"}} {
			if base, n := rs.metrics(gc.name); n > 0 {
				w("| baseline in the same run: RSS at idle / peak with %s | %.1f MB / %.1f MB | |\n", gc.label, base["rss_MB"], base["peak_rss_MB"])
				w("| baseline: CPU at idle / heap in use with %s | %.2f %% / %.1f MB | |\n", gc.label, base["cpu_idle_pct"], base["heap_inuse_MB"])
			}
		}
		w("\n")
		sessionsProse(m, w)
	}

	scaleSection(rs, w)
	renewSection(rs, w)

	w("## Raw results\n\nEvery repetition's final measurement.\n\n%s\n|---|---|---|---|---|---|---|\n", rawHeader)
	for _, n := range names {
		for i, r := range rs[n] {
			var ks []string
			for k := range r.Metrics {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			var parts []string
			for _, k := range ks {
				parts = append(parts, fmt.Sprintf("%s=%.4g", k, r.Metrics[k]))
			}
			w("| %s | %d | %d | %.0f | %s | %s | %s |\n", n, i+1, r.N, r.NsPerOp, strings.Join(parts, " "), r.Func, r.Run)
		}
	}
	return b.String()
}

// sessionsProse says where BenchmarkThousandSessions' idle CPU and memory
// go.
func sessionsProse(m map[string]float64, w func(string, ...any)) {
	w("Where the idle CPU goes: a lease manager sleeps until its next renew (or poll) and an owner's\n")
	w("fence watchdog until its deadline; one clock watcher per process wakes every 500 ms\n")
	w("(`lease.watchSlice`) to notice a resume from suspend. The lease layer alone is\n")
	w("`BenchmarkIdleLeaseManagers`' row; the rest is the pollers and paho's keepalive machinery.\n\n")
	w("Where the memory goes, from the idle process's heap and goroutine profiles (set\n")
	w("`LEASEBRIDGE_PROFILE_DIR` and the benchmark asks the process for them with SIGUSR1;\n")
	w("`cmd/leasebridge/profile.go`): of the %.0f goroutines per session, ten are paho's for the\n", m["goroutines"]/m["sessions"])
	w("session's MQTT connection (comms workers, router, keepalive), each on a stack of a few kB; the\n")
	w("lease manager's run loop and the session's term loop are leasebridge's. A poller between polls\n")
	w("and the owner's fence watchdog are timers, and an MQTT connection's recovery runs only while it\n")
	w("reconnects. The resident set is those stacks, the Go heap (live objects, spread over the\n")
	w("transports, lease managers, configuration and metric series, plus the room the collector lets\n")
	w("it grow into), the binary's own pages and the runtime's metadata. `leasebridge run` sets\n")
	w("`GOGC=%d` (`failover.GCPercent`; [operations.md](operations.md#memory)): Go counts goroutine\n", failover.GCPercent)
	w("stacks in the heap goal and keeps about a tenth above the goal resident, so the room grows with\n")
	w("the stacks and the pages freed after the takeover burst stay for it; the baseline rows are the\n")
	w("same process at the earlier `GOGC=50` and at Go's default. `leasebridge_session_state` is made\n")
	w("at each scrape from one string per session (`failover.SessionStates`) rather than kept as six\n")
	w("labelled gauges per session.\n\n")
}

// scaleSection writes BenchmarkStandbyScale's results, if it ran.
func scaleSection(rs resultSet, w func(string, ...any)) {
	bulk, n := rs.metrics("scale/3x1000/bulk")
	single, _ := rs.metrics("scale/3x1000/single")
	if n == 0 {
		return
	}
	w("## Standbys: 3 nodes x 1,000 sessions\n\n")
	w("`BenchmarkStandbyScale` (`bench/scale_test.go`) starts three node processes (this test binary\n")
	w("re-executed as a node) with the same %.0f sessions, a `lease.Manager` each on the clustered profile\n", bulk["sessions"])
	w("(acquire_poll_interval %.0fs), against one Debian etcd member: the first node owns every session,\n", bulk["poll_s"])
	w("the other two stand by. Over %.0fs of idle it counts etcd Range requests (the member's\n", bulk["window_s"])
	w("`grpc_server_handled_total`; the owner makes none, its renews are Txn) and each node's CPU\n")
	w("(user + system from `/proc`). **bulk**: each node's standbys share one `lease.RowSource`, as\n")
	w("`failover` sets it up (one Range over `key_prefix` per poll); **per session** (the baseline in\n")
	w("the same run): each standby reads its own row at every poll, as before.\n\n")
	w("| measurement (median of %d) | bulk | per session | goal |\n|---|---|---|---|\n", n)
	met := func(ok bool, goal string) string {
		if ok {
			return goal + ": met"
		}
		return goal + ": not met"
	}
	w("| store requests by the standbys per second | %.2f | %.1f | |\n", bulk["standby_reads_per_s"], single["standby_reads_per_s"])
	w("| store requests by the standbys per poll interval (%.0f standby nodes) | %.1f | %.0f | %s |\n", bulk["nodes"]-1,
		bulk["standby_reads_per_poll"], single["standby_reads_per_poll"], met(bulk["standby_reads_per_poll"] <= 2*(bulk["nodes"]-1), "O(nodes)"))
	w("| CPU of an idle standby node (mean of the two, %% of one core) | %.2f %% | %.2f %% | %s |\n",
		bulk["standby_cpu_pct"], single["standby_cpu_pct"], met(bulk["standby_cpu_pct_highest"] < 2, "< 2 %"))
	w("| CPU of the owner node (1,000 renews per renew_interval) | %.2f %% | %.2f %% | |\n\n", bulk["owner_cpu_pct"], single["owner_cpu_pct"])
	w("Reproduce this section alone (written to a temporary file whose path the run prints):\n\n")
	w("```sh\ngo test -run '^$' -bench 'StandbyScale|IdleLeaseManagers' -benchtime 1x -count 3 -timeout 30m ./bench/\n```\n\n")
}

// pageRun is one run of the page's results and the benchmark functions
// it measured.
type pageRun struct {
	name  string
	funcs []string
}

// runsOf lists the runs of rs in order, each with its functions sorted.
func runsOf(rs resultSet) []pageRun {
	funcs := map[string]map[string]bool{}
	for _, list := range rs {
		for _, r := range list {
			if funcs[r.Run] == nil {
				funcs[r.Run] = map[string]bool{}
			}
			funcs[r.Run]["`"+r.Func+"`"] = true
		}
	}
	var out []pageRun
	for _, run := range slices.Sorted(maps.Keys(funcs)) {
		out = append(out, pageRun{run, slices.Sorted(maps.Keys(funcs[run]))})
	}
	return out
}

// The page is what benchMarkdown renders from the page's own raw results:
// a number edited by hand, or a section whose rendering changed without a
// run, fails.
func TestBenchmarksPageUpToDate(t *testing.T) {
	page, err := os.ReadFile(pagePath)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := parseRawResults(string(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		t.Fatalf("%s has no raw results", pagePath)
	}
	if got := benchMarkdown(rs); got != string(page) {
		t.Errorf("%s is not what its raw results render: render it again with `LEASEBRIDGE_WRITE_DOCS=1 go test -run '^$' ./bench/`, or measure again (%s)", pagePath, reproduce)
	}
}
