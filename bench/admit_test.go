package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/routes"
)

// Large configuration shape: 200 sessions, each one Modbus device with 5
// poll groups published by 5 routes, 1,000 routes in all.
const (
	largeSessions        = 200
	largeRoutesPerSesson = 5
)

// largeConfig generates the configuration. Every route of a session
// resolves the same manager inputs, so admission compares 5 routes per
// session field by field.
func largeConfig() string {
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
			for k := range 4 {
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

func writeLargeConfig(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "large.yaml")
	if err := os.WriteFile(path, []byte(largeConfig()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// The generated configuration is what the benchmark says it is, and it is
// admitted: a refused or invalid file would make the admit timing
// meaningless.
func TestLargeConfigAdmitted(t *testing.T) {
	path := writeLargeConfig(t)
	cfg, err := routes.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != largeSessions*largeRoutesPerSesson {
		t.Fatalf("%d routes, want %d", len(cfg.Routes), largeSessions*largeRoutesPerSesson)
	}
	reps := cfg.Admit()
	if len(reps) != largeSessions {
		t.Fatalf("%d sessions, want %d", len(reps), largeSessions)
	}
	for _, r := range reps {
		if !r.Admitted() {
			t.Fatalf("session %s refused: %v", r.Session, r.Refusals)
		}
	}
	out, err := exec.Command(lbBinary(t), "admit", "-c", path).CombinedOutput()
	if err != nil {
		t.Fatalf("leasebridge admit: %v\n%s", err, out)
	}
}

// BenchmarkAdmitLarge times `leasebridge admit -c FILE` as a whole process
// (fork, exec, load, admit, print, exit) on the generated configuration,
// and, in process, routes.Load plus Admit.
func BenchmarkAdmitLarge(b *testing.B) {
	path := writeLargeConfig(b)
	bin := lbBinary(b)
	b.Run("process", func(b *testing.B) {
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
		record("admit/process", result{N: b.N, NsPerOp: ns, Metrics: map[string]float64{"worst_ms": float64(worst) / 1e6}})
	})
	b.Run("in-process", func(b *testing.B) {
		for range b.N {
			cfg, err := routes.Load(path)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range cfg.Admit() {
				if !r.Admitted() {
					b.Fatalf("refused: %v", r.Refusals)
				}
			}
		}
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(ns/1e6, "ms/admit")
		record("admit/in-process", result{N: b.N, NsPerOp: ns})
	})
}
