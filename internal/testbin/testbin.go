// Package testbin builds the leasebridge and leasebridge-demo binaries once
// per test process and hands out loopback addresses, for tests that run
// `leasebridge run` processes (cmd, lab, bench).
package testbin

import (
	"fmt"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/freeport"
)

// binary is one command of this tree, built once per test process.
type binary struct {
	once sync.Once
	path string
	err  error
}

var bridge, demo binary

// build builds the command pkg into dir()/name on first use and returns
// its path.
func (b *binary) build(tb testing.TB, dir func() (string, error), name, pkg string) string {
	tb.Helper()
	b.once.Do(func() {
		d, err := dir()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(d, name)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// Leasebridge returns the path of a leasebridge binary built from this
// tree, building it on first use.
func Leasebridge(tb testing.TB) string {
	tb.Helper()
	return bridge.build(tb, func() (string, error) { return os.MkdirTemp("", "leasebridge-bin-") },
		"leasebridge", "github.com/leasebridge/leasebridge/cmd/leasebridge")
}

// Demo returns the path of a leasebridge-demo binary built from this tree
// into the directory of Leasebridge's binary, where the demo finds the
// bridge it runs (as scripts/demo builds them), building it on first use.
func Demo(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Dir(Leasebridge(tb))
	return demo.build(tb, func() (string, error) { return dir, nil },
		"leasebridge-demo", "github.com/leasebridge/leasebridge/cmd/leasebridge-demo")
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

// Bridge describes one bridge of the shared test configuration.
type Bridge struct {
	// Etcd is the lease store endpoint, Broker the bridge's broker URL (a
	// fault proxy in tests that cut it), PLC the Modbus device address.
	Etcd, Broker, PLC string
	// Node names the bridge; HTTP is its http_listen (omitted when empty).
	Node, HTTP string
	// Kubernetes, when set, is the lease_store.kubernetes flow mapping
	// ("namespace: ns, kubeconfig: file"), and Etcd is not used.
	Kubernetes string
	// KeyPrefix separates the tests' lease rows.
	KeyPrefix string
	// Topic is the poll route's topic template.
	Topic string
	// Manager and BrokerExtra are extra YAML lines for the manager block
	// (indented two spaces, one key per line) and extra keys for the
	// broker's flow mapping ("username: u, password_file: f").
	Manager, BrokerExtra string
}

// KeepAlive is the MQTT keepalive of Config; the broker-path budget adds
// mqtt.DetectionBound(KeepAlive).
const KeepAlive = time.Second

// Manager is the manager block of Config: second-scale lease timings and
// a one-second broker-path threshold.
const Manager = `manager:
  lease_ttl: 2s
  renew_interval: 300ms
  lease_renew_jitter: 100ms
  renew_call_timeout: 200ms
  acquire_poll_interval: 200ms
  step_down_grace: 300ms
  broker_health_step_down: 1s
  failover_slo: 60s
`

// BrokerTimings are the settings of Config's broker, after its url.
var BrokerTimings = "keepalive: " + KeepAlive.String() + ", connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms"

// PLCDevice is the devices block the bridge configurations of tests
// share: one Modbus PLC "plc" at addr (a plcsim), its group g polled
// every interval, with a uint16 counter "cycles" at holding register 0
// and a writable uint16 "setpoint" at 1.
func PLCDevice(addr string, interval time.Duration) string {
	return fmt.Sprintf(`devices:
  plc:
    kind: modbus_tcp
    address: %s
    connect_timeout: 500ms
    request_timeout: 500ms
    close_timeout: 200ms
    groups:
      - name: g
        interval: %s
        tags:
          - {name: cycles, register: holding, address: 0, type: uint16}
          - {name: setpoint, register: holding, address: 1, type: uint16, writable: true}
`, addr, interval)
}

// Config is the bridge configuration the process-level tests share:
// second-scale lease timings, a one-second broker-path threshold, one
// Modbus PLC polled every 50 ms into a poll route, and a write route on
// w/req -> w/resp.
func Config(b Bridge) string {
	extra := ""
	if b.BrokerExtra != "" {
		extra = ", " + b.BrokerExtra
	}
	if b.Manager != "" && !strings.HasSuffix(b.Manager, "\n") {
		b.Manager += "\n"
	}
	httpLine := ""
	if b.HTTP != "" {
		httpLine = "http_listen: " + b.HTTP + "\n"
	}
	store := "endpoints: [" + b.Etcd + "]"
	if b.Kubernetes != "" {
		store = "kubernetes: {" + b.Kubernetes + "}"
	}
	return fmt.Sprintf(`deployment_mode: clustered
node: %s
%slease_store: {%s, key_prefix: %s}
%s%sbrokers:
  local: {url: "%s", %s%s}
%sroutes:
  - {name: telemetry, session: plc, kind: poll, device: plc, broker: local, publish: every_poll, topic: "%s"}
  - {name: commands, session: plc, kind: write, device: plc, broker: local, request_topic: w/req, reply_topic: w/resp, qos: 1}
`, b.Node, httpLine, store, b.KeyPrefix, Manager, b.Manager, b.Broker, BrokerTimings, extra, PLCDevice(b.PLC, 50*time.Millisecond), b.Topic)
}
