package dataplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/admittest"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/internal/writetest"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/modbus"
	"github.com/leasebridge/leasebridge/transports/opcua"
	"github.com/leasebridge/leasebridge/transports/s7"
)

// writeRig is one in-process bridge with a write route, against a real
// etcd, a real mosquitto and a real Modbus server that logs every write.
type writeRig struct {
	plc   *plcsim.PLC
	mq    *testmqtt.Mosquitto
	sv    *failover.Supervisor
	reg   *prometheus.Registry
	owner *writetest.Requester
}

const writeRigConfig = `deployment_mode: clustered
node: %s
lease_store: {endpoints: [%s], key_prefix: /writes-test/}
manager:
  lease_ttl: 2s
  renew_interval: 300ms
  lease_renew_jitter: 100ms
  renew_call_timeout: 200ms
  acquire_poll_interval: 200ms
  step_down_grace: 300ms
  broker_health_step_down: off
  failover_slo: 60s
brokers:
  local: {url: "%s", keepalive: 1s, connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms}
%sroutes:
  - {name: commands, session: plc, kind: write, device: plc, broker: local, request_topic: w/req, reply_topic: w/resp, max_age: %s}
`

func startWriteRig(t *testing.T, maxAge time.Duration) *writeRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := testbin.StartEtcd(t, t.TempDir())
	// No per-client queue limit: the burst below is queued for the bridge
	// while it works through it (docs/writes.md, "Broker settings").
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{MaxQueuedMessages: -1})
	plc := testbin.StartPLC(t, time.Hour)
	y := fmt.Sprintf(writeRigConfig, "node-a", e.Endpoints[0], mq.URL, testbin.PLCDevice(plc.Addr(), time.Second), maxAge)
	cfg, err := routes.Parse("writes.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	reports := admittest.Admit(t, cfg)
	store, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: e.Endpoints, DialTimeout: time.Second, KeyPrefix: cfg.LeaseStore.KeyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	reg := prometheus.NewRegistry()
	// The bridge's warnings and errors are shown when the test fails: a
	// lost broker connection explains a stalled burst.
	logs := &testbin.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge log (warnings and errors):\n%s", logs.String())
		}
	})
	sv, err := failover.New(failover.Options{Config: cfg, Reports: reports, Store: store, Identity: lease.NewIdentity("node-a"),
		Node: "node-a", Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})), Metrics: failover.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &writeRig{plc: plc, mq: mq, sv: sv, reg: reg, owner: writetest.New(t, mq.URL, "w/req", "w/resp")}
	deadline := time.Now().Add(reports[0].OwnerDeath.Total)
	for s := sv.Status()[0]; !(s.Owner && s.ServiceLevelFull); s = sv.Status()[0] {
		if time.Now().After(deadline) {
			t.Fatalf("no ServiceLevelFull within the owner-death budget %s: %+v", reports[0].OwnerDeath.Total, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

// counters reads leasebridge_write_requests_total by outcome.
func counters(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "leasebridge_write_requests_total" {
			continue
		}
		for _, m := range mf.Metric {
			out[label(m, "outcome")] += int(m.GetCounter().GetValue())
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// 5,000 valid requests at QoS 1 and 5,000 at QoS 0 in one burst each,
// with invalid ones among them: every request gets exactly one reply, the
// device received exactly the requests answered ok (each once, never an
// invalid one), and the metric agrees with the replies.
func TestWriteBurstEveryRequestAnsweredOnce(t *testing.T) {
	// max_age outlasts the slowest burst a loaded machine may take, so
	// only the deliberately old request is stale.
	r := startWriteRig(t, 30*time.Minute)
	now := time.Now()
	type bad struct {
		id, code string
		payload  string
	}
	ok := func(id string, v any) string { return string(writetest.Request(id, "setpoint", v, now)) }
	iso := now.UTC().Format(time.RFC3339Nano)
	invalid := []bad{
		{"trailing", dataplane.WriteInvalid, ok("trailing", 60001) + ` {"x":1}`},
		{"dupkey", dataplane.WriteInvalid, `{"id":"dupkey","tag":"setpoint","value":60002,"value":60003,"issued_at":"` + iso + `"}`},
		{"unknown-field", dataplane.WriteInvalid, `{"id":"unknown-field","tag":"setpoint","value":60004,"issued_at":"` + iso + `","qos":1}`},
		{"", dataplane.WriteInvalid, `{"tag":"setpoint","value":60005,"issued_at":"` + iso + `"}`},
		{"no-issued-at", dataplane.WriteInvalid, `{"id":"no-issued-at","tag":"setpoint","value":60006}`},
		{"fraction", dataplane.WriteBadValue, ok("fraction", 1.5)},
		{"too-big", dataplane.WriteBadValue, ok("too-big", 70000)},
		{"negative", dataplane.WriteBadValue, ok("negative", -1)},
		{"string-junk", dataplane.WriteBadValue, ok("string-junk", "60007x")},
		{"nope", dataplane.WriteUnknownTag, string(writetest.Request("nope", "nope", 60008, now))},
		{"ro", dataplane.WriteReadOnly, string(writetest.Request("ro", "cycles", 60009, now))},
		{"old", dataplane.WriteStale, string(writetest.Request("old", "setpoint", 60010, now.Add(-time.Hour)))},
		{"future", dataplane.WriteClockSkew, string(writetest.Request("future", "setpoint", 60011, now.Add(time.Hour)))},
		{"long-id-" + strings.Repeat("x", 300), dataplane.WriteInvalid, ok("long-id-"+strings.Repeat("x", 300), 60012)},
		// Beyond MaxWriteRequestBytes nothing is read, not even the id.
		{"", dataplane.WriteInvalid, string(writetest.Request("huge", strings.Repeat("t", 1<<20), 60013, now))},
	}
	const n = 5000
	var toks []paho.Token
	for i := 1; i <= n; i++ {
		toks = append(toks, r.owner.C.Publish("w/req", 1, false, ok(fmt.Sprintf("q1-%d", i), i)))
		if i%(n/len(invalid)) == 0 && i/(n/len(invalid)) <= len(invalid) {
			toks = append(toks, r.owner.C.Publish("w/req", 1, false, invalid[i/(n/len(invalid))-1].payload))
		}
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	r.owner.WaitCount(t, n+len(invalid), time.Minute)
	// QoS 0 has no flow control: the queue overflows and the rest is
	// answered busy at once (a QoS 0 burst first would fill the queue
	// ahead of QoS 1 requests just the same).
	for i := 1; i <= n; i++ {
		r.owner.C.Publish("w/req", 0, false, ok(fmt.Sprintf("q0-%d", i), 10000+i))
	}
	total := 2*n + len(invalid)
	r.owner.WaitCount(t, total, time.Minute)

	byID, _ := r.owner.All()
	codes := map[string]int{}
	okValues := map[uint16]string{}
	for id, reps := range byID {
		if want := map[bool]int{true: 2, false: 1}[id == ""]; len(reps) != want {
			t.Errorf("id %.40q: %d replies, want %d: %+v", id, len(reps), want, reps)
		}
		for _, rep := range reps {
			codes[rep.Code]++
		}
		rep := reps[0]
		if b, err := json.Marshal(rep); err != nil || len(b) > dataplane.MaxWriteReplyBytes {
			t.Errorf("reply to %.40q: %d bytes, more than %d", id, len(b), dataplane.MaxWriteReplyBytes)
		}
		if rep.Code == dataplane.WriteOK {
			var v int
			if _, err := fmt.Sscanf(id[strings.Index(id, "-")+1:], "%d", &v); err != nil {
				t.Fatalf("ok reply to unexpected id %q", id)
			}
			if strings.HasPrefix(id, "q0-") {
				v += 10000
			}
			okValues[uint16(v)] = id
		}
	}
	if len(byID) != total-1 { // two without an id
		t.Errorf("%d distinct ids answered, want %d", len(byID), total-1)
	}
	for _, b := range invalid {
		id := b.id
		if strings.HasPrefix(id, "long-id-") {
			id = id[:dataplane.MaxWriteIDBytes]
			for k := range byID {
				if strings.HasPrefix(k, id) && strings.Contains(k, "bytes cut]") {
					id = k
				}
			}
		}
		for _, rep := range byID[id] {
			if rep.Code != b.code {
				t.Errorf("request %.40q: reply %+v, want %s", id, rep, b.code)
			}
		}
	}
	// Every QoS 1 request was executed (the broker's in-flight window paces
	// them); QoS 0 requests beyond the queue were answered busy at once.
	for i := 1; i <= n; i++ {
		if reps := byID[fmt.Sprintf("q1-%d", i)]; len(reps) != 1 || reps[0].Code != dataplane.WriteOK {
			t.Fatalf("q1-%d: %+v", i, reps)
		}
	}
	if codes[dataplane.WriteOK]+codes[dataplane.WriteBusy] != 2*n || codes[dataplane.WriteBusy] == 0 {
		t.Errorf("outcomes %v: want ok + busy = %d with some busy", codes, 2*n)
	}

	// The device's witness: exactly the requests answered ok, each once.
	writes := r.plc.Writes()
	seen := map[uint16]int{}
	for _, w := range writes {
		if w.Addr != plcsim.SetpointRegister || len(w.Values) != 1 {
			t.Fatalf("unexpected device write %+v", w)
		}
		seen[w.Values[0]]++
		if _, ok := okValues[w.Values[0]]; !ok {
			t.Errorf("device got %d, which no ok reply accounts for", w.Values[0])
		}
	}
	if len(writes) != codes[dataplane.WriteOK] {
		t.Errorf("device served %d writes, %d ok replies", len(writes), codes[dataplane.WriteOK])
	}
	for v, c := range seen {
		if c != 1 {
			t.Errorf("value %d written %d times", v, c)
		}
	}
	got := counters(t, r.reg)
	for code, c := range codes {
		if got[code] != c {
			t.Errorf("leasebridge_write_requests_total{outcome=%q} = %d, replies %d", code, got[code], c)
		}
	}
	t.Logf("%d requests: outcomes %v; device writes %d", total, codes, len(writes))
}

// The write route tells refusals apart by the shared kinds each device
// package's sentinels match; their texts stay the package's own.
func TestDeviceRefusalsMatchSharedKinds(t *testing.T) {
	kinds := []error{transports.ErrBadValue, transports.ErrUnknownTag, transports.ErrReadOnly}
	for _, errs := range [][]error{
		{modbus.ErrValue, modbus.ErrUnknownTag, modbus.ErrReadOnly},
		{s7.ErrValue, s7.ErrUnknownTag, s7.ErrReadOnly},
		{opcua.ErrValue, opcua.ErrUnknownTag, opcua.ErrReadOnly},
	} {
		for i, err := range errs {
			wrapped := fmt.Errorf("write tag %q: %w", "t", err)
			for j, kind := range kinds {
				if errors.Is(wrapped, kind) != (i == j) {
					t.Errorf("%v matches %v: %v, want %v", err, kind, !(i == j), i == j)
				}
			}
		}
	}
}
