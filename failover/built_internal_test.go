package failover

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

// probeKind is a device kind that counts how often its transport is built;
// it is never opened.
const probeKind = "built_probe"

var (
	probeBuilds atomic.Int64
	// probeLast is the transport the probe kind built last.
	probeLast atomic.Pointer[transporttest.Stub]
)

func init() {
	routes.RegisterKind(routes.DeviceKind{Name: probeKind, Endpoint: func(d *routes.Device) (routes.Endpoint, error) {
		return routes.Endpoint{ID: probeKind + ":" + d.Address}, nil
	}})
	transports.Register(probeKind, func(name string, _ any) (transports.Transport, error) {
		probeBuilds.Add(1)
		tr := &transporttest.Stub{Device: name, Bound: time.Second, Closing: time.Second}
		probeLast.Store(tr)
		return tr, nil
	})
}

// The first term of a session opens the device preflight built; later
// terms build their own, so a run builds each device once before its
// first term and once per later term.
func TestFirstTermUsesThePreflightDevice(t *testing.T) {
	cfg, err := routes.Parse("cfg.yaml", []byte(`deployment_mode: clustered
lease_store: {endpoints: [http://127.0.0.1:2379]}
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
  dev: {kind: `+probeKind+`, address: a, groups: [{name: g, tags: [{name: t, address: x, type: int16}]}]}
routes:
  - {name: r1, session: s, kind: poll, device: dev, broker: local}
  - {name: r2, session: s, kind: poll, device: dev, broker: local}
`))
	if err != nil {
		t.Fatal(err)
	}
	probeBuilds.Store(0)
	built, errs := preflight.Build(cfg, true)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var pre transports.Transport // what preflight built
	if p := probeLast.Load(); p != nil {
		pre = p
	}
	if _, err := New(Options{Config: &routes.Config{}, Built: built}); err == nil {
		t.Error("New accepted a Built of another configuration")
	}
	s := &session{sup: &Supervisor{o: Options{Config: cfg, Built: built}}, name: "s", routes: routesBySession(cfg)["s"]}
	first, err := s.build(1, "o")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.build(2, "o")
	if err != nil {
		t.Fatal(err)
	}
	if pre == nil || first.dp.Devices["dev"] != pre || second.dp.Devices["dev"] == pre {
		t.Errorf("preflight %p, first term %p, second term %p: want the first term to open the preflight's, the second its own",
			pre, first.dp.Devices["dev"], second.dp.Devices["dev"])
	}
	if n := probeBuilds.Load(); n != 2 {
		t.Errorf("the device was built %d times for preflight and two terms, want 2", n)
	}
}
