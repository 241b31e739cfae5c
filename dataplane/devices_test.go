package dataplane_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/admittest"
	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
	"github.com/leasebridge/leasebridge/transports/s7/s7test"

	_ "github.com/leasebridge/leasebridge/transports/opcua"
	_ "github.com/leasebridge/leasebridge/transports/s7"
)

// routeHarness runs one bridge on a configuration against an embedded
// etcd and broker, and records what reaches the broker.
type routeHarness struct {
	broker  *embedbroker.Broker
	mu      sync.Mutex
	values  map[string]mqtt.ValueMessage
	replies map[string]dataplane.WriteReply
	// delivered counts the values the broker delivered on v/#; reg is
	// the bridge's registry.
	delivered int
	reg       *prometheus.Registry
}

func startRoutes(t *testing.T, cfgTemplate string, args ...any) (*routeHarness, *failover.Supervisor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e, b := testbin.StartEtcd(t, t.TempDir()), testbin.StartBroker(t)
	h := &routeHarness{broker: b, values: map[string]mqtt.ValueMessage{}, replies: map[string]dataplane.WriteReply{}, reg: prometheus.NewRegistry()}
	if err := b.Server.Subscribe("v/#", 1, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		var v mqtt.ValueMessage
		if json.Unmarshal(pk.Payload, &v) == nil {
			h.mu.Lock()
			h.values[pk.TopicName] = v
			h.delivered++
			h.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Server.Subscribe("w/resp", 2, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		var r dataplane.WriteReply
		if json.Unmarshal(pk.Payload, &r) == nil {
			h.mu.Lock()
			h.replies[r.ID] = r
			h.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprintf(cfgTemplate, append([]any{e.Endpoints[0], b.URL}, args...)...)
	cfg, err := routes.Parse("routes.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	reports := admittest.Admit(t, cfg)
	store, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: e.Endpoints, DialTimeout: time.Second, KeyPrefix: "/routes-test/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	sv, err := failover.New(failover.Options{Config: cfg, Reports: reports, Store: store, Identity: lease.NewIdentity("n"),
		Node: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: failover.NewMetrics(h.reg)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- sv.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	return h, sv
}

// value waits for a value on topic that satisfies ok.
func (h *routeHarness) value(t *testing.T, topic string, ok func(mqtt.ValueMessage) bool) mqtt.ValueMessage {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		v, seen := h.values[topic]
		h.mu.Unlock()
		if seen && ok(v) {
			return v
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Fatalf("no matching value on %s; last %+v", topic, h.values[topic])
	return mqtt.ValueMessage{}
}

func (h *routeHarness) write(t *testing.T, id, tag string, value any) dataplane.WriteReply {
	t.Helper()
	req, _ := json.Marshal(dataplane.WriteRequest{ID: id, Tag: tag, Value: value, IssuedAt: time.Now()})
	if err := h.broker.Server.Publish("w/req", req, false, 1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		r, ok := h.replies[id]
		h.mu.Unlock()
		if ok {
			return r
		}
	}
	t.Fatalf("no reply to write %s", id)
	return dataplane.WriteReply{}
}

const s7Routes = `deployment_mode: clustered
lease_store: {endpoints: [%[1]s]}
manager: {lease_ttl: 2s, renew_interval: 300ms, lease_renew_jitter: 100ms, renew_call_timeout: 200ms, acquire_poll_interval: 200ms, broker_health_step_down: "off"}
brokers:
  local: {url: "%[2]s", connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms}
devices:
  oven:
    kind: s7
    address: %[3]s
    rack: 0
    slot: 1
    connect_timeout: 1s
    request_timeout: 500ms
    close_timeout: 200ms
    groups:
      - name: g
        interval: 50ms
        tags:
          - {name: count, address: DB1.DBW0, type: int16}
          - {name: temp, address: DB1.DBD2, type: float32, writable: true}
          - {name: door, address: DB1.DBX6.1, type: bool}
routes:
  - {name: oven-poll, session: oven, kind: poll, device: oven, broker: local, topic: "v/{device}/{tag}"}
  - {name: oven-write, session: oven, kind: write, device: oven, broker: local, request_topic: w/req, reply_topic: w/resp, qos: 1}
`

// An S7 PLC (the project's wire-faithful test server) through the
// supervisor to a real broker: polled values arrive with the epoch, a
// write request changes the data block and is answered.
func TestS7RoutesThroughMQTT(t *testing.T) {
	plc, err := s7test.Start(0, 1, 240)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plc.Close)
	db := make([]byte, 8)
	count := int16(-42)
	binary.BigEndian.PutUint16(db[0:], uint16(count))
	binary.BigEndian.PutUint32(db[2:], math.Float32bits(21.5))
	db[6] = 1 << 1
	plc.SetDB(1, db)
	h, _ := startRoutes(t, s7Routes, plc.Addr())

	epochOK := func(v mqtt.ValueMessage) bool { return v.Quality == "good" && v.Epoch >= 1 }
	if v := h.value(t, "v/oven/count", epochOK); v.Value != float64(-42) {
		t.Errorf("count = %v, want -42", v.Value)
	}
	if v := h.value(t, "v/oven/temp", epochOK); v.Value != 21.5 {
		t.Errorf("temp = %v, want 21.5", v.Value)
	}
	if v := h.value(t, "v/oven/door", epochOK); v.Value != true {
		t.Errorf("door = %v, want true", v.Value)
	}
	if r := h.write(t, "a", "temp", 180.25); r.Code != dataplane.WriteOK {
		t.Fatalf("write temp: %+v", r)
	}
	if got := math.Float32frombits(binary.BigEndian.Uint32(plc.DB(1)[2:])); got != 180.25 {
		t.Errorf("DB1.DBD2 = %v after the write, want 180.25", got)
	}
	h.value(t, "v/oven/temp", func(v mqtt.ValueMessage) bool { return v.Value == 180.25 })
	if r := h.write(t, "b", "count", 1); r.Code == dataplane.WriteOK {
		t.Errorf("write to a read-only tag succeeded: %+v", r)
	}
	if _, peak, _ := plc.Conns(); peak != 1 {
		t.Errorf("the S7 server saw %d concurrent connections", peak)
	}
}

const uaRoutes = `deployment_mode: clustered
lease_store: {endpoints: [%[1]s]}
manager: {lease_ttl: 2s, renew_interval: 300ms, lease_renew_jitter: 100ms, renew_call_timeout: 200ms, acquire_poll_interval: 200ms, broker_health_step_down: "off"}
brokers:
  local: {url: "%[2]s", connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms}
devices:
  packer:
    kind: opcua
    address: opc.tcp://%[3]s
    connect_timeout: 2s
    request_timeout: 1s
    close_timeout: 500ms
    groups:
      - name: polled
        interval: 50ms
        tags:
          - {name: speed, address: "ns=1;s=speed", type: float64, writable: true}
      - name: pushed
        mode: subscribe
        # An hour: a change reaches the broker only because the pushed
        # value is published at once (gopcua's server notifies every
        # change whatever the sampling interval).
        interval: 1h
        publishing_interval: 100ms
        tags:
          - {name: count, address: "ns=1;s=count", type: int32}
routes:
  - {name: packer-poll, session: packer, kind: poll, device: packer, broker: local, topic: "v/{device}/{tag}"}
  - {name: packer-write, session: packer, kind: write, device: packer, broker: local, request_topic: w/req, reply_topic: w/resp, qos: 1}
`

// An OPC UA server (gopcua) through the supervisor to a real broker: a
// polled and a subscribed group arrive with the epoch, a change on the
// server reaches the broker (a subscribed one as the subscription pushes
// it), and a write request changes the node.
func TestOPCUARoutesThroughMQTT(t *testing.T) {
	srv := uatest.Start(t)
	srv.Space.Set("speed", 1.5)
	srv.Space.Set("count", int32(7))
	h, _ := startRoutes(t, uaRoutes, srv.Proxy.Addr())
	good := func(want any) func(mqtt.ValueMessage) bool {
		return func(v mqtt.ValueMessage) bool { return v.Quality == "good" && v.Epoch >= 1 && v.Value == want }
	}
	h.value(t, "v/packer/speed", good(1.5))
	h.value(t, "v/packer/count", good(float64(7)))
	srv.Space.Set("count", int32(8))
	h.value(t, "v/packer/count", good(float64(8)))
	if r := h.write(t, "a", "speed", 3.25); r.Code != dataplane.WriteOK {
		t.Fatalf("write speed: %+v", r)
	}
	if got := srv.Space.Get("speed").Value.Value(); got != 3.25 {
		t.Errorf("speed on the server = %v after the write, want 3.25", got)
	}
	h.value(t, "v/packer/speed", good(3.25))
	if peak := srv.Proxy.Peak(); peak != 1 {
		t.Errorf("the OPC UA server saw %d concurrent connections", peak)
	}
}

const bridgeRoutes = `deployment_mode: clustered
lease_store: {endpoints: [%[1]s]}
manager: {lease_ttl: 2s, renew_interval: 300ms, lease_renew_jitter: 100ms, renew_call_timeout: 200ms, acquire_poll_interval: 200ms, broker_health_step_down: "off"}
brokers:
  local: {url: "%[2]s", connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms}
  remote: {url: "%[3]s", client_id: "uplink-{session}", connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms}
routes:
  - name: uplink
    session: uplink
    kind: bridge
    remote: remote
    broker: local
    topics:
      - {from: "site/#", to: "v/", direction: in, qos: 1}
`

// A bridge route under the supervisor: once the session is served,
// messages on the remote broker arrive on the local one under the mapped
// topic.
func TestBridgeRouteThroughSupervisor(t *testing.T) {
	remote, err := embedbroker.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remote.Close() })
	h, sv := startRoutes(t, bridgeRoutes, remote.URL)
	for deadline := time.Now().Add(10 * time.Second); !sv.Status()[0].ServiceLevelFull; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bridge session not serving: %+v", sv.Status())
		}
	}
	msg, _ := json.Marshal(mqtt.ValueMessage{Timestamp: 1, Value: 42.0, Quality: "good", Epoch: 9})
	if err := remote.Server.Publish("site/line1/temp", msg, false, 1); err != nil {
		t.Fatal(err)
	}
	got := h.value(t, "v/line1/temp", func(v mqtt.ValueMessage) bool { return v.Value == 42.0 })
	if got.Epoch != 9 {
		t.Errorf("bridged payload changed: %+v", got)
	}
}
