package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	gbmodbus "github.com/goburrow/modbus"

	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/modbus"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// dataTags is the poll group's size: one read request of this many
// holding registers, then one publish per tag, per operation.
const dataTags = 8

// dataConfig describes the same device, group and route for leasebridge's
// transports as the raw loop uses. %[1]s is the Modbus server, %[2]s the
// broker URL.
const dataConfig = `deployment_mode: clustered
node: bench
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {broker_health_step_down: "off"}
brokers:
  local: {url: "%[2]s", connect_timeout: 5s, reconcile_timeout: 5s, unmatched_grace: 1s}
devices:
  plc:
    kind: modbus_tcp
    address: %[1]s
    groups:
      - name: g
        interval: 1s
        tags:
%[3]sroutes:
  - {name: telemetry, session: plc, kind: poll, device: plc, broker: local, publish: every_poll, topic: "bench/{device}/{tag}"}
`

// dataPeers are the peers both loops run against.
type dataPeers struct {
	modbus string
	regs   *registers
	broker *testmqtt.Mosquitto
	cfg    *routes.Config
	// received counts value messages a subscriber got, to check delivery.
	received atomic.Int64
	// loopReads is the Modbus read requests of the last timed loop.
	loopReads int64
}

func startDataPeers(b *testing.B) *dataPeers {
	b.Helper()
	p := &dataPeers{broker: testmqtt.StartMosquitto(b, testmqtt.MosquittoConfig{})}
	p.modbus, p.regs = startModbus(b, 16)
	var tags strings.Builder
	for i := range dataTags {
		fmt.Fprintf(&tags, "          - {name: t%d, register: holding, address: %d, type: uint16}\n", i, i)
	}
	y := fmt.Sprintf(dataConfig, p.modbus, p.broker.URL, tags.String())
	cfg, err := routes.Parse("bench.yaml", []byte(y))
	if err != nil {
		b.Fatal(err)
	}
	p.cfg = cfg
	sub := pahoClient(b, p.broker.URL, "bench-sub")
	tok := sub.Subscribe("bench/#", 0, func(paho.Client, paho.Message) { p.received.Add(1) })
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	return p
}

func pahoClient(b *testing.B, url, id string) paho.Client {
	b.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(id).SetProtocolVersion(4).SetCleanSession(true))
	tok := c.Connect()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		b.Fatalf("connect %s: %v", url, tok.Error())
	}
	b.Cleanup(func() { c.Disconnect(100) })
	return c
}

// rawValue is the payload the raw loop publishes: the same fields, in the
// same encoding, as leasebridge's mqtt.ValueMessage.
type rawValue struct {
	Timestamp int64  `json:"timestamp"`
	Value     any    `json:"value,omitempty"`
	Quality   string `json:"quality"`
	Epoch     uint64 `json:"epoch"`
}

// rawLoop is the baseline: goburrow reads the registers, paho publishes
// each tag, waiting for every publish token.
func rawLoop(b *testing.B, p *dataPeers, qos byte) {
	h := gbmodbus.NewTCPClientHandler(p.modbus)
	h.Timeout, h.SlaveId = 2*time.Second, 1
	if err := h.Connect(); err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	c := gbmodbus.NewClient(h)
	pc := pahoClient(b, p.broker.URL, "bench-raw")
	topics := make([]string, dataTags)
	for i := range topics {
		topics[i] = fmt.Sprintf("bench/plc/t%d", i)
	}
	b.ResetTimer()
	p.loopReads = p.regs.reads.Load()
	for range b.N {
		raw, err := c.ReadHoldingRegisters(0, dataTags)
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		for j := range dataTags {
			payload, err := json.Marshal(rawValue{Timestamp: now.UnixMilli(), Value: binary.BigEndian.Uint16(raw[2*j:]), Quality: "good", Epoch: 1})
			if err != nil {
				b.Fatal(err)
			}
			tok := pc.Publish(topics[j], qos, false, payload)
			tok.Wait()
			if err := tok.Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	p.loopReads = p.regs.reads.Load() - p.loopReads
}

// leasebridgeLoop is leasebridge's data plane as dataplane's poller runs
// it: the transports are opened under the owner context with its guard,
// the Modbus transport polls the group under the workers' context derived
// from it (the fence check before every request) and the MQTT transport
// publishes each value with the epoch, on the tag's topic filled once from
// the route's template (dataplane/dataplane.go and poll.go,
// poller.topic).
func leasebridgeLoop(b *testing.B, p *dataPeers, qos byte) { lbLoop(b, p, qos) }

func lbLoop(b *testing.B, p *dataPeers, qos byte) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := lease.Now() + time.Hour
	gctx := transports.WithGuard(ctx, func() error {
		if lease.Now() >= deadline {
			return lease.ErrFenced
		}
		return nil
	})
	dev, err := modbus.New("modbus_tcp:plc", p.cfg.Devices["plc"])
	if err != nil {
		b.Fatal(err)
	}
	if err := dev.Open(gctx); err != nil {
		b.Fatal(err)
	}
	defer dev.Close(context.Background())
	cl, err := mqtt.New("mqtt:local", mqtt.Config{Broker: *p.cfg.Brokers["local"], Session: "bench-lb", Node: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	cl.SetIdentity(mqtt.Identity{Owner: "bench#1", Epoch: 1})
	if err := cl.Open(gctx); err != nil {
		b.Fatal(err)
	}
	defer cl.Close(context.Background())
	wctx, wcancel := context.WithCancel(gctx)
	defer wcancel()
	route := p.cfg.Routes[0]
	topicFor := func(tag string) string {
		return strings.NewReplacer("{session}", route.Session, "{device}", route.Device, "{group}", "g", "{tag}", tag).Replace(route.Topic)
	}
	cached := map[string]string{}
	b.ResetTimer()
	p.loopReads = p.regs.reads.Load()
	for range b.N {
		vals, err := dev.Poll(wctx, "g")
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range vals {
			if v.Quality != transports.Good {
				b.Fatalf("tag %s: %v", v.Tag, v.Err)
			}
			topic, ok := cached[v.Tag]
			if !ok {
				topic = topicFor(v.Tag)
				cached[v.Tag] = topic
			}
			if err := cl.PublishValue(wctx, topic, qos, false, v); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	p.loopReads = p.regs.reads.Load() - p.loopReads
}

// BenchmarkDataPlane compares one poll of an 8-tag group plus its 8
// publishes through leasebridge's transports with the raw loop, at QoS 0
// and QoS 1, on one Modbus server and one mosquitto.
func BenchmarkDataPlane(b *testing.B) {
	p := startDataPeers(b)
	for _, qos := range []byte{0, 1} {
		for _, impl := range []struct {
			name string
			loop func(*testing.B, *dataPeers, byte)
		}{{"raw", rawLoop}, {"leasebridge", leasebridgeLoop}} {
			name := fmt.Sprintf("qos%d/%s", qos, impl.name)
			b.Run(name, func(b *testing.B) {
				impl.loop(b, p, qos)
				perOp := float64(p.loopReads) / float64(b.N)
				if perOp != 1 {
					b.Fatalf("%.2f Modbus read requests per poll, want 1", perOp)
				}
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(1e9/ns, "polls/s")
				b.ReportMetric(1e9/ns*dataTags, "msgs/s")
				record(b, "dataplane/"+name, result{N: b.N, NsPerOp: ns, Metrics: map[string]float64{"polls/s": 1e9 / ns}})
			})
		}
	}
}
