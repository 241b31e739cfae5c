package preflight_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

// skewKind is a device kind whose transport reports an activation bound
// its settings skew away from the common connect_timeout +
// request_timeout, and a close bound of its own: admission must sum what
// the built transport reports, not a formula of the configuration. It is
// built, never opened.
const skewKind = "preflight_skew"

type skewConfig struct {
	// Skew is added to the transport's activation bound.
	Skew routes.Duration `yaml:"skew"`
	// Close is the transport's close bound.
	Close routes.Duration `yaml:"close"`
}

var skewBuilds atomic.Int64

func init() {
	routes.RegisterKind(routes.DeviceKind{Name: skewKind, Settings: func() any { return &skewConfig{} },
		Endpoint: func(d *routes.Device) (routes.Endpoint, error) {
			return routes.Endpoint{ID: skewKind + ":" + d.Address}, nil
		}})
	transports.Register(skewKind, func(name string, cfg any) (transports.Transport, error) {
		skewBuilds.Add(1)
		dev := cfg.(*routes.Device)
		c, r, _ := dev.Timeouts()
		sc := dev.Settings.(*skewConfig)
		if sc.Skew.D() > time.Hour {
			return nil, fmt.Errorf("skew %s is above 1h", sc.Skew.D())
		}
		return &transporttest.Stub{Device: name, Bound: c + r + sc.Skew.D(), Closing: sc.Close.D()}, nil
	})
}

// admit is what admit and run compute for cfg (preflight.Admit), failing
// the test on a problem preflight finds.
func admit(t testing.TB, cfg *routes.Config) []admission.Report {
	t.Helper()
	reports, errs := preflight.Admit(cfg, true)
	if len(errs) > 0 {
		t.Fatalf("preflight: %v", errs)
	}
	return reports
}

func skewConf(t *testing.T, skew, closing string) *routes.Config {
	t.Helper()
	y := `deployment_mode: clustered
lease_store: {endpoints: [http://127.0.0.1:2379]}
manager: {failover_slo: 10m, broker_health_step_down: 60s}
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
  dev:
    kind: ` + skewKind + `
    address: a
    skew: ` + skew + `
    close: ` + closing + `
    groups: [{name: g, tags: [{name: t, address: x, type: int16}]}]
routes:
  - {name: r1, session: s, kind: poll, device: dev, broker: local}
  - {name: r2, session: s, kind: poll, device: dev, broker: local}
`
	cfg, err := routes.Parse("cfg.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Admission sums the bounds the built transport reports: a kind whose
// transport skews its activation bound, or keeps a close bound of its
// own, moves the budgets by exactly that much. Each device is built once.
func TestAdmissionSumsWhatTheTransportReports(t *testing.T) {
	skewBuilds.Store(0)
	plain := admit(t, skewConf(t, "0s", "1s"))[0]
	if n := skewBuilds.Load(); n != 1 {
		t.Errorf("the device was built %d times, want once", n)
	}
	skewed := admit(t, skewConf(t, "90s", "4s"))[0]
	if !plain.Admitted() || !skewed.Admitted() {
		t.Fatalf("refused: %v / %v", plain.Refusals, skewed.Refusals)
	}
	if d := skewed.Activation - plain.Activation; d != 90*time.Second {
		t.Errorf("activation moved by %v, want the transport's skew 90s", d)
	}
	if d := skewed.OwnerDeath.Total - plain.OwnerDeath.Total; d != 90*time.Second {
		t.Errorf("owner-death budget moved by %v, want 90s", d)
	}
	if skewed.CloseBound-plain.CloseBound != 3*time.Second || skewed.FenceAfter-plain.FenceAfter != -3*time.Second {
		t.Errorf("close bound %v -> %v, fence %v -> %v: want the transport's close bound (+3s) and the fence 3s earlier",
			plain.CloseBound, skewed.CloseBound, plain.FenceAfter, skewed.FenceAfter)
	}
}

// A device whose transport cannot be built is refused with its file and
// line, and its session is not admitted on a guessed bound.
func TestUnbuiltTransportIsRefusedAtItsLine(t *testing.T) {
	reports, errs := preflight.Admit(skewConf(t, "2h", "1s"), false)
	if len(errs) != 1 || errs[0].Line != 7 || !strings.Contains(errs[0].Error(), "skew 2h0m0s is above 1h") {
		t.Fatalf("errors %v, want one at the device (line 7)", errs)
	}
	if len(reports) != 1 || reports[0].Admitted() || !strings.Contains(strings.Join(reports[0].Refusals, "\n"), "devices.dev (cfg.yaml:7): its transport was not built") {
		t.Fatalf("reports %+v, want the session refused naming the device", reports)
	}
}
