package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// admit is what admit and run compute for cfg (preflight.Admit): the
// budgets of the transports built from it.
func admit(tb testing.TB, cfg *routes.Config) []admission.Report {
	tb.Helper()
	reps, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	return reps
}

// Large configuration shape: 200 sessions, each one Modbus device with 5
// poll groups published by 5 routes, 1,000 routes in all.
const (
	largeSessions        = 200
	largeRoutesPerSesson = 5
)

// largeConfig generates the configuration. Every route of a session
// resolves the same manager inputs, so admission compares 5 routes per
// session field by field.
func largeConfig(tagsPerGroup int) string {
	var b strings.Builder
	b.WriteString(`deployment_mode: clustered
node: gen
lease_store: {endpoints: ["http://127.0.0.1:2379"], key_prefix: /large/}
manager:
  lease_ttl: 45s
  renew_interval: 10s
  broker_health_step_down: 60s
  failover_slo: 900s
brokers:
  local: {url: "tcp://127.0.0.1:1883", keepalive: 30s}
devices:
`)
	for s := range largeSessions {
		fmt.Fprintf(&b, "  press-%03d:\n    kind: modbus_tcp\n    address: 10.0.%d.%d:502\n    groups:\n", s, s/250, s%250+1)
		for g := range largeRoutesPerSesson {
			fmt.Fprintf(&b, "      - name: g%d\n        interval: %dms\n        tags:\n", g, 250*(g+1))
			for k := range tagsPerGroup {
				fmt.Fprintf(&b, "          - {name: t%d_%d, register: holding, address: %d, type: uint16}\n", g, k, g*4+k)
			}
		}
	}
	b.WriteString("routes:\n")
	for s := range largeSessions {
		for g := range largeRoutesPerSesson {
			fmt.Fprintf(&b, "  - {name: press-%03d-g%d, session: press-%03d, kind: poll, device: press-%03d, broker: local, groups: [g%d]}\n", s, g, s, s, g)
		}
	}
	return b.String()
}

// tagShapes are the tags per poll group the benchmark generates: 1,000
// tags in all (one per route) and 4,000.
var tagShapes = []int{1, 4}

func writeLargeConfig(tb testing.TB, tagsPerGroup int) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), fmt.Sprintf("large-%d.yaml", tagsPerGroup))
	if err := os.WriteFile(path, []byte(largeConfig(tagsPerGroup)), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// The generated configuration is what the benchmark says it is, and it is
// admitted: a refused or invalid file would make the admit timing
// meaningless.
func TestLargeConfigAdmitted(t *testing.T) {
	for _, tags := range tagShapes {
		path := writeLargeConfig(t, tags)
		cfg, err := routes.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Routes) != largeSessions*largeRoutesPerSesson {
			t.Fatalf("%d routes, want %d", len(cfg.Routes), largeSessions*largeRoutesPerSesson)
		}
		n := 0
		for _, d := range cfg.Devices {
			for _, g := range d.Groups {
				n += len(g.Tags)
			}
		}
		if want := largeSessions * largeRoutesPerSesson * tags; n != want {
			t.Fatalf("%d tags, want %d", n, want)
		}
		reps := admit(t, cfg)
		if len(reps) != largeSessions {
			t.Fatalf("%d sessions, want %d", len(reps), largeSessions)
		}
		for _, r := range reps {
			if !r.Admitted() {
				t.Fatalf("session %s refused: %v", r.Session, r.Refusals)
			}
		}
		out, err := exec.Command(testbin.Leasebridge(t), "admit", "-c", path).CombinedOutput()
		if err != nil {
			t.Fatalf("leasebridge admit: %v\n%s", err, out)
		}
	}
}

// BenchmarkAdmitLarge times `leasebridge admit -c FILE` as a whole process
// (fork, exec, load, admit, print, exit) on the generated configuration
// with one and with four tags per poll group, and, in process,
// routes.Load plus Admit.
func BenchmarkAdmitLarge(b *testing.B) {
	bin := testbin.Leasebridge(b)
	// The floor of any command: fork, exec and the package initialisation
	// of the whole binary, timed as `leasebridge help`.
	b.Run("start-only", func(b *testing.B) {
		for range b.N {
			if out, err := exec.Command(bin, "help").CombinedOutput(); err != nil {
				b.Fatalf("leasebridge help: %v\n%s", err, out)
			}
		}
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(ns/1e6, "ms/start")
		record(b, "admit/start-only", result{N: b.N, NsPerOp: ns})
	})
	for _, tags := range tagShapes {
		path := writeLargeConfig(b, tags)
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		shape := fmt.Sprintf("tags=%d", largeSessions*largeRoutesPerSesson*tags)
		b.Run(shape+"/process", func(b *testing.B) {
			var worst time.Duration
			for range b.N {
				start := time.Now()
				out, err := exec.Command(bin, "admit", "-c", path).CombinedOutput()
				if err != nil {
					b.Fatalf("leasebridge admit: %v\n%s", err, out)
				}
				worst = max(worst, time.Since(start))
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns/1e6, "ms/admit")
			record(b, "admit/"+shape+"/process", result{N: b.N, NsPerOp: ns,
				Metrics: map[string]float64{"worst_ms": float64(worst) / 1e6, "file_kB": float64(st.Size()) / 1024}})
		})
		b.Run(shape+"/paired", func(b *testing.B) { benchPaired(b, path, "admit/"+shape+"/paired") })
	}
}

// benchPaired times, alternately in one loop, yaml.v3 parsing the file
// into a node tree (the floor under routes.Parse, which does it first) and
// what `leasebridge admit` does in process after reading the file. Load on
// a shared machine then hits both alike. Each pair gives admit's own work
// (in process minus parse); the result is the median own work, the
// median parse and their ratio, in the process's CPU time (user + system, garbage collection included: the
// work) and in wall time (which adds the waits for a core other processes
// hold). Each timing starts from a collected heap, as a fresh process does.
// One operation is 15 pairs: the median of the few pairs -benchtime would
// run still moves with the load.
func benchPaired(b *testing.B, path, name string) {
	const pairs = 15
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var parse, own, wallParse, wallOwn []float64
	for range pairs * b.N {
		pc, pw := timed(func() {
			var n yaml.Node
			if err := yaml.Unmarshal(data, &n); err != nil {
				b.Fatal(err)
			}
		})
		ac, aw := timed(func() { admitInProcess(b, path) })
		parse, own = append(parse, pc), append(own, ac-pc)
		wallParse, wallOwn = append(wallParse, pw), append(wallOwn, aw-pw)
	}
	m := map[string]float64{"pairs": float64(pairs * b.N),
		"parse_cpu_ms": median(parse) / 1e6, "own_cpu_ms": median(own) / 1e6, "own_per_parse_cpu": median(own) / median(parse),
		"parse_wall_ms": median(wallParse) / 1e6, "own_wall_ms": median(wallOwn) / 1e6, "own_per_parse_wall": median(wallOwn) / median(wallParse),
	}
	b.ReportMetric(m["parse_cpu_ms"], "cpu-ms/parse")
	b.ReportMetric(m["own_cpu_ms"], "cpu-ms/own")
	b.ReportMetric(m["own_per_parse_cpu"], "cpu-own/parse")
	b.ReportMetric(m["own_per_parse_wall"], "wall-own/parse")
	record(b, name, result{N: b.N, Metrics: m})
}

// timed runs f after a garbage collection and returns the process's CPU
// time and the wall time it took, in ns.
func timed(f func()) (cpu, wall float64) {
	runtime.GC()
	c, start := cpuTime(), time.Now()
	f()
	return float64(cpuTime() - c), float64(time.Since(start))
}

// median is the median of vs (the upper one of an even count); vs is
// sorted in place.
func median(vs []float64) float64 {
	sort.Float64s(vs)
	return vs[len(vs)/2]
}

// admitInProcess is what `leasebridge admit -c path` does between start
// and exit (cmd/leasebridge admit.go): load and validate the file, build
// every transport without opening it (preflight.Build), admit every
// session and print the text report, here to io.Discard.
func admitInProcess(tb testing.TB, path string) {
	cfg, err := routes.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	built, errs := preflight.Build(cfg, false)
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	sessions := built.Sessions()
	reports := routes.AdmitSessions(sessions)
	if doc := report.FromReports(cfg, sessions, reports); !doc.Admitted {
		tb.Fatalf("refused: %+v", doc.Sessions)
	}
	out := bufio.NewWriter(io.Discard)
	report.WriteText(out, cfg, sessions, reports, nil)
	if err := out.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// admitSection writes BenchmarkAdmitLarge's results, if it ran.
func admitSection(rs resultSet, w func(string, ...any)) {
	nRoutes := largeSessions * largeRoutesPerSesson
	if _, n := rs.metrics(fmt.Sprintf("admit/tags=%d/paired", nRoutes)); n == 0 {
		return
	}
	w("## `leasebridge admit` on a large configuration\n\n")
	w("`BenchmarkAdmitLarge` (`bench/admit_test.go`) generates %d sessions, each a Modbus device with\n", largeSessions)
	w("%d poll groups published by %d routes (%d routes), with 1 or 4 tags per group.\n\n", largeRoutesPerSesson, largeRoutesPerSesson, nRoutes)
	w("**Goal** (issue 13): admit's own work is no more than `yaml.v3` parsing the file. Own work is\n")
	w("what `leasebridge admit -c FILE` does in process (`routes.Load`, `preflight.Build`, admission\n")
	w("and the text report) minus `yaml.v3` parsing the same file into a node tree, which `routes.Parse`\n")
	w("does first. The two are timed alternately in one loop (parse, in process, parse, ...), each from\n")
	w("a collected heap, so that load from other processes hits both alike. Own work is taken per pair;\n")
	w("a repetition (%.0f pairs) gives the median own work, the median parse and their ratio, and the\n", pairsOf(rs, nRoutes))
	w("table shows the repetition whose CPU ratio is the median. Work is the process's CPU time (user +\n")
	w("system, garbage collection included), on which the goal is judged; wall time adds the waits for\n")
	w("a core that other processes hold.\n\n")
	w("| configuration | yaml.v3 parse (CPU) | admit's own work (CPU) | own / parse (CPU) | own / parse (wall) | goal: own <= parse |\n")
	w("|---|---|---|---|---|---|\n")
	for _, tags := range tagShapes {
		r, _, ok := rs.medianBy(fmt.Sprintf("admit/tags=%d/paired", nRoutes*tags), "own_per_parse_cpu")
		if !ok {
			continue
		}
		m := r.Metrics
		met := "met"
		if m["own_per_parse_cpu"] > 1 {
			met = "not met"
		}
		w("| %d routes, %d tags | %.1f ms | %.1f ms | %.2f | %.2f | %s |\n", nRoutes, nRoutes*tags,
			m["parse_cpu_ms"], m["own_cpu_ms"], m["own_per_parse_cpu"], m["own_per_parse_wall"], met)
	}
	w("\nFor information, the whole process: `leasebridge admit -c FILE` timed from fork to exit.\n\n")
	w("| configuration | file | whole process (mean of b.N) | worst single run |\n|---|---|---|---|\n")
	for _, tags := range tagShapes {
		p, _, ok := rs.median(fmt.Sprintf("admit/tags=%d/process", nRoutes*tags))
		if !ok {
			continue
		}
		w("| %d routes, %d tags | %.0f kB | %s | %s |\n", nRoutes, nRoutes*tags, p.Metrics["file_kB"], ms(p.NsPerOp), ms(p.Metrics["worst_ms"]*1e6))
	}
	start, _, _ := rs.median("admit/start-only")
	y, _, _ := rs.medianBy(fmt.Sprintf("admit/tags=%d/paired", nRoutes), "own_per_parse_cpu")
	w("\nThe earlier goal of < 50 ms for the whole process is withdrawn (issue 13): it sat below process\n")
	w("start plus `yaml.v3`'s own parse on these machines (`leasebridge help`, fork to exit, takes %s\n", ms(start.NsPerOp))
	w("and the parse of the 1,000-tag file %s of wall time), and `yaml.v3` stays.\n\n", ms(y.Metrics["parse_wall_ms"]*1e6))
}

// pairsOf is the pairs of a repetition of the paired benchmark.
func pairsOf(rs resultSet, nRoutes int) float64 {
	r, _, _ := rs.medianBy(fmt.Sprintf("admit/tags=%d/paired", nRoutes), "pairs")
	return r.Metrics["pairs"]
}
