package failover_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// skewKind is a device kind whose transport discloses an activation bound
// its settings skew away from routes' (connect + request): Preflight must
// refuse what admission did not sum. It is built, never opened.
const skewKind = "preflight_skew"

type skewConfig struct {
	// Skew is added to the transport's activation bound.
	Skew routes.Duration `yaml:"skew"`
}

type skewTransport struct {
	name    string
	bound   time.Duration
	closing time.Duration
}

func (t *skewTransport) Name() string                   { return t.name }
func (t *skewTransport) ActivationBound() time.Duration { return t.bound }
func (t *skewTransport) CloseBound() time.Duration      { return t.closing }
func (t *skewTransport) Open(context.Context) error     { return errors.New("skew: never opened") }
func (t *skewTransport) Close(context.Context) error    { return nil }
func (t *skewTransport) State() transports.State        { return transports.State{} }

var skewBuilds atomic.Int64

func init() {
	routes.RegisterKind(routes.DeviceKind{Name: skewKind, Settings: func() any { return &skewConfig{} },
		Endpoint: func(d *routes.Device) (routes.Endpoint, error) {
			return routes.Endpoint{ID: skewKind + ":" + d.Address}, nil
		}})
	transports.Register(skewKind, func(name string, cfg any) (transports.Transport, error) {
		skewBuilds.Add(1)
		dev := cfg.(*routes.Device)
		c, r, cl := dev.Timeouts()
		return &skewTransport{name: name, bound: c + r + dev.Settings.(*skewConfig).Skew.D(), closing: cl}, nil
	})
}

func TestPreflightRefusesBoundsAdmissionDidNotSum(t *testing.T) {
	conf := func(skew string) *routes.Config {
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
	skewBuilds.Store(0)
	if errs := failover.Preflight(conf("0s"), true); len(errs) != 0 {
		t.Fatalf("equal bounds refused: %v", errs)
	}
	if n := skewBuilds.Load(); n != 1 {
		t.Errorf("the device was built %d times, want once", n)
	}
	errs := failover.Preflight(conf("1s"), true)
	if len(errs) != 1 || errs[0].Line != 7 || !strings.Contains(errs[0].Error(), "activation bound 8s and close bound 1s, admission summed 7s and 1s") {
		t.Fatalf("skewed bounds: %v, want one error at the device (line 7) naming both bounds", errs)
	}
}
