package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/httpapi"
	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/admittest"
	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"

	_ "github.com/leasebridge/leasebridge/transports/modbus"
)

// peers are the real servers one test runs against: an embedded etcd, an
// embedded MQTT broker and a simulated Modbus PLC behind a counting proxy.
type peers struct {
	etcd   *etcdembed.Server
	broker *embedbroker.Broker
	plc    *plcsim.PLC
}

func startPeers(t *testing.T) *peers {
	t.Helper()
	return &peers{etcd: testbin.StartEtcd(t, t.TempDir()), broker: testbin.StartBroker(t), plc: testbin.StartPLC(t, 20*time.Millisecond)}
}

// bridge is one in-process bridge: a supervisor with its own etcd client.
type bridge struct {
	node    string
	sv      *failover.Supervisor
	reg     *prometheus.Registry
	report  admission.Report
	reports []admission.Report
	logs    *testbin.SyncBuffer
	cancel  context.CancelFunc
	done    chan error
	http    *httptest.Server
	brokerP *faultproxy.Proxy // the bridge's own path to the broker
}

func (p *peers) bridge(t *testing.T, node string) *bridge {
	t.Helper()
	return p.bridgeAt(t, node, "/failover-test/", p.etcd.Endpoints[0], nil, nil)
}

// bridgeWith is bridge with the configuration adjusted by edit.
func (p *peers) bridgeWith(t *testing.T, node string, edit func(*testbin.Bridge)) *bridge {
	t.Helper()
	return p.bridgeAt(t, node, "/failover-test/", p.etcd.Endpoints[0], nil, edit)
}

// bridgeOf is a bridge of the fleet keyPrefix names; logs, when set,
// receives its log as JSON lines.
func (p *peers) bridgeOf(t *testing.T, node, keyPrefix string, logs io.Writer) *bridge {
	t.Helper()
	return p.bridgeAt(t, node, keyPrefix, p.etcd.Endpoints[0], logs, nil)
}

// bridgeVia is bridge with the lease store at etcdURL (a fault proxy, or a
// port nobody listens on).
func (p *peers) bridgeVia(t *testing.T, node, etcdURL string) *bridge {
	t.Helper()
	return p.bridgeAt(t, node, "/failover-test/", etcdURL, nil, nil)
}

// bridgeAt is a bridge of the fleet keyPrefix names with the lease store at
// etcdURL, its configuration adjusted by edit when set; jsonLogs, when set,
// also receives its log as JSON lines.
func (p *peers) bridgeAt(t *testing.T, node, keyPrefix, etcdURL string, jsonLogs io.Writer, edit func(*testbin.Bridge)) *bridge {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr := strings.TrimPrefix(p.broker.URL, "tcp://")
	bp, err := faultproxy.Start(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bp.Close() })
	br := testbin.Bridge{Etcd: etcdURL, Broker: "tcp://" + bp.Addr(), PLC: p.plc.Addr(), Node: node,
		KeyPrefix: keyPrefix, Topic: "t/{tag}"}
	if edit != nil {
		edit(&br)
	}
	y := testbin.Config(br)
	cfg, err := routes.Parse(node+".yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	reports := admittest.Admit(t, cfg)
	if !reports[0].Admitted() {
		t.Fatalf("refused: %v", reports[0].Refusals)
	}
	store, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: []string{etcdURL}, DialTimeout: time.Second, KeyPrefix: cfg.LeaseStore.KeyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	reg := prometheus.NewRegistry()
	logs := &testbin.SyncBuffer{}
	var w io.Writer = logs
	if testing.Verbose() {
		w = io.MultiWriter(logs, testWriter{t})
	}
	log := slog.New(slog.NewTextHandler(w, nil)).With("node", node)
	if jsonLogs != nil {
		log = slog.New(slog.NewJSONHandler(io.MultiWriter(logs, jsonLogs), nil))
	}
	sv, err := failover.New(failover.Options{Config: cfg, Reports: reports, Store: store, StoreEndpoints: []string{etcdURL},
		Identity: lease.NewIdentity(node), Node: node, Logger: log, Metrics: failover.NewMetrics(reg), Claims: store})
	if err != nil {
		t.Fatal(err)
	}
	b := &bridge{node: node, sv: sv, reg: reg, report: reports[0], reports: reports, cancel: cancel, done: make(chan error, 1),
		brokerP: bp, logs: logs}
	b.http = httptest.NewServer(httpapi.Handler(sv, reg))
	t.Cleanup(b.http.Close)
	go func() { b.done <- sv.Run(ctx) }()
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (b *bridge) status() failover.SessionStatus { return b.sv.Status()[0] }

// waitFull waits until the bridge owns the session at ServiceLevelFull.
func waitFull(t *testing.T, b *bridge, limit time.Duration) time.Time {
	t.Helper()
	at, _ := testbin.Observe(t, limit, func() (bool, string) {
		s := b.status()
		return s.Owner && s.ServiceLevelFull, fmt.Sprintf("%s at ServiceLevelFull: %+v", b.node, s)
	})
	return at
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// One bridge against real etcd, a real broker and a real Modbus server
// reaches ServiceLevelFull, serves writes, and says so on /readyz and
// /metrics; a second bridge stands by and takes over after a graceful
// release within two poll boundaries, two calls and its activation.
func TestServeWriteHealthAndGracefulHandover(t *testing.T) {
	p := startPeers(t)
	var mu sync.Mutex
	replies := map[string]dataplane.WriteReply{}
	if err := p.broker.Server.Subscribe("w/resp", 1, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		var r dataplane.WriteReply
		if json.Unmarshal(pk.Payload, &r) == nil {
			mu.Lock()
			replies[r.ID] = r
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	a := p.bridge(t, "node-a")
	waitFull(t, a, a.report.OwnerDeath.Total)
	if code, body := get(t, a.http.URL+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"service_level_full":true`) {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if code, body := get(t, a.http.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	_, metrics := get(t, a.http.URL+"/metrics")
	for _, want := range []string{
		`leasebridge_session_state{session="plc",state="serving"} 1`,
		`leasebridge_lease_epoch{session="plc"} 1`,
		`leasebridge_failure_to_full_seconds_count{cause="initial",session="plc"} 1`,
		fmt.Sprintf(`leasebridge_failover_budget_seconds{mode="owner_death",session="plc"} %g`, a.report.OwnerDeath.Total.Seconds()),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A write request goes to the device and is answered with the epoch.
	write := func(id, tag string, value any) dataplane.WriteReply {
		t.Helper()
		req, _ := json.Marshal(dataplane.WriteRequest{ID: id, Tag: tag, Value: value, IssuedAt: time.Now()})
		if err := p.broker.Server.Publish("w/req", req, false, 1); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			r, ok := replies[id]
			mu.Unlock()
			if ok {
				return r
			}
		}
		t.Fatalf("no reply to write %s", id)
		return dataplane.WriteReply{}
	}
	if r := write("w1", "setpoint", 321); r.Code != dataplane.WriteOK || r.Epoch != 1 || p.plc.Holding(plcsim.SetpointRegister) != 321 {
		t.Fatalf("write: reply %+v, setpoint %d", r, p.plc.Holding(plcsim.SetpointRegister))
	}
	if r := write("w2", "nope", 1); r.Code != dataplane.WriteUnknownTag {
		t.Errorf("write to unknown tag: %+v", r)
	}
	if r := write("w3", "cycles", 1); r.Code != dataplane.WriteReadOnly || !strings.Contains(r.Message, "writable") {
		t.Errorf("write to read-only tag: %+v", r)
	}

	b := p.bridge(t, "node-b")
	time.Sleep(500 * time.Millisecond)
	if s := b.status(); s.Owner || s.State != "standby" {
		t.Fatalf("second bridge is not a standby: %+v", s)
	}
	if code, _ := get(t, b.http.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("standby /readyz = %d, want 200 (it owns nothing)", code)
	}
	start := time.Now()
	a.cancel() // SIGTERM: end the term in order and release the lease
	if err := <-a.done; err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	released := time.Since(start)
	full := waitFull(t, b, b.report.OwnerDeath.Total).Sub(start)
	// A released row is taken in one Acquire: two poll boundaries and two
	// calls at most, then activation.
	tm := b.report.Timing
	pb, _ := admission.PollBoundary(tm.AcquirePollInterval)
	bound := released + 2*pb + 2*tm.RenewCallTimeout + b.report.Activation
	if full > bound {
		t.Errorf("handover after release took %s, bound %s (release %s)", full, bound, released)
	}
	// The released row carries the instant the shutdown began, so the
	// successor's measure covers the old owner's close and release too.
	if s := b.status(); s.FailureToFullNS <= 0 || time.Duration(s.FailureToFullNS) > full {
		t.Errorf("successor FailureToFullDuration %s, want within the measured handover %s", time.Duration(s.FailureToFullNS), full)
	}
	if _, m := get(t, b.http.URL+"/metrics"); !strings.Contains(m, `leasebridge_failure_to_full_seconds_count{cause="handover",session="plc"} 1`) {
		t.Errorf("successor /metrics lacks the handover cause")
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("the PLC saw %d concurrent connections", peak)
	}
	t.Logf("graceful handover: release %s, successor at ServiceLevelFull %s after the stop (bound %s)", released, full, bound)
}

// Cutting only the owner's broker path (a blackhole: sockets stay open,
// nothing passes) makes it step down: it releases its lease and Run returns
// ErrStepDown, and the standby takes over within the broker-path budget
// plus the transport's keepalive detection, which runs before the
// threshold clock starts.
func TestBrokerPathStepDown(t *testing.T) {
	p := startPeers(t)
	a := p.bridge(t, "node-a")
	waitFull(t, a, a.report.OwnerDeath.Total)
	b := p.bridge(t, "node-b")
	time.Sleep(300 * time.Millisecond)

	cut := time.Now()
	if err := a.brokerP.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	budget := a.report.BrokerPath.Total + mqtt.DetectionBound(testbin.KeepAlive)
	select {
	case err := <-a.done:
		if !errors.Is(err, failover.ErrStepDown) {
			t.Fatalf("owner Run returned %v, want ErrStepDown", err)
		}
	case <-time.After(budget):
		t.Fatalf("owner did not step down within %s", budget)
	}
	steppedDown := time.Since(cut)
	full := waitFull(t, b, budget).Sub(cut)
	if full > budget {
		t.Errorf("takeover %s after the cut, broker-path budget + detection %s", full, budget)
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("the PLC saw %d concurrent connections", peak)
	}
	_, metrics := get(t, a.http.URL+"/metrics")
	if !strings.Contains(metrics, `leasebridge_step_downs_total{session="plc"} 1`) {
		t.Errorf("/metrics lacks the step-down")
	}
	t.Logf("broker path cut: owner stepped down after %s, standby at ServiceLevelFull %s after the cut (budget %s + detection %s)",
		steppedDown, full, a.report.BrokerPath.Total, mqtt.DetectionBound(testbin.KeepAlive))
}
