package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/routes"
)

// admit is what admit and run compute for cfg (failover.Admit): the
// budgets of the transports built from it.
func admit(tb testing.TB, cfg *routes.Config) []admission.Report {
	tb.Helper()
	reps, errs := failover.Admit(cfg, false)
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
		record("admit/start-only", result{N: b.N, NsPerOp: ns})
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
			record("admit/"+shape+"/process", result{N: b.N, NsPerOp: ns,
				Metrics: map[string]float64{"worst_ms": float64(worst) / 1e6, "file_kB": float64(st.Size()) / 1024}})
		})
		b.Run(shape+"/in-process", func(b *testing.B) {
			for range b.N {
				cfg, err := routes.Load(path)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range admit(b, cfg) {
					if !r.Admitted() {
						b.Fatalf("refused: %v", r.Refusals)
					}
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns/1e6, "ms/admit")
			record("admit/"+shape+"/in-process", result{N: b.N, NsPerOp: ns})
		})
		// The floor under the current decoder: yaml.v3 parsing the file
		// into a node tree, which routes.Parse does first.
		b.Run(shape+"/yaml-parse-only", func(b *testing.B) {
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				var n yaml.Node
				if err := yaml.Unmarshal(data, &n); err != nil {
					b.Fatal(err)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns/1e6, "ms/parse")
			record("admit/"+shape+"/yaml-parse-only", result{N: b.N, NsPerOp: ns})
		})
	}
}
