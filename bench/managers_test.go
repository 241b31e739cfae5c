package bench

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
)

// oneSession is a clustered-profile configuration whose admitted timing
// the idle-manager benchmark uses.
const oneSession = `deployment_mode: clustered
node: n
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {broker_health_step_down: "off"}
brokers:
  local: {url: "tcp://127.0.0.1:1883"}
devices:
  d: {kind: modbus_tcp, address: "127.0.0.1:502", groups: [{name: g, tags: [{name: t, register: holding, address: 0, type: uint16}]}]}
routes:
  - {name: r, session: s, kind: poll, device: d, broker: local}
`

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdleLeaseManagers isolates the lease layer of the
// 1,000-session process: 1,000 lease.Managers on the clustered profile,
// each owning its row in an in-memory store, with nothing else running.
// It reports their CPU at idle (% of one core) and goroutines, to tell the
// lease layer's share from the transports'; the baseline in the same run
// is 10 managers. It runs once whatever b.N is.
func BenchmarkIdleLeaseManagers(b *testing.B) {
	b.Run("1000", func(b *testing.B) { idleLeaseManagers(b, manySessions, "sessions/1000-lease-managers-only") })
	b.Run("10", func(b *testing.B) { idleLeaseManagers(b, 10, "sessions/10-lease-managers-only") })
}

func idleLeaseManagers(b *testing.B, n int, name string) {
	cfg, err := routes.Parse("one.yaml", []byte(oneSession))
	if err != nil {
		b.Fatal(err)
	}
	lc := lease.ConfigFromReport(admit(b, cfg)[0])
	store := lease.NewMemStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g0 := runtime.NumGoroutine()
	mgrs := make([]*lease.Manager, n)
	for i := range mgrs {
		m, err := lease.NewManager(lease.Options{Store: store, Key: fmt.Sprintf("s%04d", i), Identity: lease.NewIdentity("n"), Config: lc})
		if err != nil {
			b.Fatal(err)
		}
		mgrs[i] = m
		go func() { _ = m.Run(ctx) }()
	}
	deadline := time.Now().Add(time.Minute)
	for _, m := range mgrs {
		for m.Owner() == nil {
			if time.Now().After(deadline) {
				b.Fatal("managers did not all become owners")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(time.Second)
	c0, t0 := cpuTime(), time.Now()
	time.Sleep(10 * time.Second)
	cpu := 100 * (cpuTime() - c0).Seconds() / time.Since(t0).Seconds()
	gs := float64(runtime.NumGoroutine() - g0)
	b.ReportMetric(cpu, "cpu_idle_pct")
	b.ReportMetric(gs, "goroutines")
	record(b, name, result{N: 1, Metrics: map[string]float64{"cpu_idle_pct": cpu, "goroutines": gs}})
}
