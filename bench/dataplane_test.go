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

// stages is the time a block of polls spent, per poll: reading the
// device and publishing the values (encoding included).
type stages struct{ read, publish time.Duration }

// pollBlock runs n polls of one loop, each one read request and one
// publish per tag, and returns where their time went.
type pollBlock func(n int) (stages, error)

// openRaw connects the baseline: goburrow reads the registers, paho
// publishes each tag, waiting for every publish token.
func openRaw(b *testing.B, p *dataPeers, qos byte) pollBlock {
	h := gbmodbus.NewTCPClientHandler(p.modbus)
	h.Timeout, h.SlaveId = 2*time.Second, 1
	if err := h.Connect(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	c := gbmodbus.NewClient(h)
	pc := pahoClient(b, p.broker.URL, fmt.Sprintf("bench-raw-%d", qos))
	topics := make([]string, dataTags)
	for i := range topics {
		topics[i] = fmt.Sprintf("bench/plc/t%d", i)
	}
	return func(n int) (stages, error) {
		var st stages
		for range n {
			t0 := time.Now()
			raw, err := c.ReadHoldingRegisters(0, dataTags)
			if err != nil {
				return st, err
			}
			now := time.Now()
			st.read += now.Sub(t0)
			for j := range dataTags {
				payload, err := json.Marshal(rawValue{Timestamp: now.UnixMilli(), Value: binary.BigEndian.Uint16(raw[2*j:]), Quality: "good", Epoch: 1})
				if err != nil {
					return st, err
				}
				tok := pc.Publish(topics[j], qos, false, payload)
				tok.Wait()
				if err := tok.Error(); err != nil {
					return st, err
				}
			}
			st.publish += time.Since(now)
		}
		return st, nil
	}
}

// openLB connects leasebridge's data plane as dataplane's poller runs it:
// the transports are opened under the owner context with its guard, the
// Modbus transport polls the group under the workers' context derived
// from it (the fence check before every request) and the MQTT transport
// publishes each value with the epoch, on the tag's topic filled once from
// the route's template (dataplane/poll.go, poller.once and poller.topic).
func openLB(b *testing.B, p *dataPeers, qos byte) pollBlock {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
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
	b.Cleanup(func() { _ = dev.Close(context.Background()) })
	cl, err := mqtt.New("mqtt:local", mqtt.Config{Broker: *p.cfg.Brokers["local"], Session: fmt.Sprintf("bench-lb-%d", qos), Node: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	cl.SetIdentity(mqtt.Identity{Owner: "bench#1", Epoch: 1})
	if err := cl.Open(gctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close(context.Background()) })
	wctx, wcancel := context.WithCancel(gctx)
	b.Cleanup(wcancel)
	route := p.cfg.Routes[0]
	topicFor := func(tag string) string {
		return strings.NewReplacer("{session}", route.Session, "{device}", route.Device, "{group}", "g", "{tag}", tag).Replace(route.Topic)
	}
	cached := map[string]string{}
	return func(n int) (stages, error) {
		var st stages
		for range n {
			t0 := time.Now()
			vals, err := dev.Poll(wctx, "g")
			if err != nil {
				return st, err
			}
			t1 := time.Now()
			st.read += t1.Sub(t0)
			for _, v := range vals {
				if v.Quality != transports.Good {
					return st, fmt.Errorf("tag %s: %w", v.Tag, v.Err)
				}
				topic, ok := cached[v.Tag]
				if !ok {
					topic = topicFor(v.Tag)
					cached[v.Tag] = topic
				}
				if err := cl.PublishValue(wctx, topic, qos, false, v); err != nil {
					return st, err
				}
			}
			st.publish += time.Since(t1)
		}
		return st, nil
	}
}

// pairPolls is the polls of each loop in one pair of blocks: long enough
// (several ms) that a block's clock readings are small beside it, short
// enough that load changing during a pair hits both blocks alike.
const pairPolls = 16

// block is one timed block of polls, per poll.
type block struct {
	wall, cpu float64 // ns per poll; cpu is the whole test process's
	st        stages
}

// add is the sum of two blocks' figures.
func (k block) add(o block) block {
	return block{wall: k.wall + o.wall, cpu: k.cpu + o.cpu, st: stages{read: k.st.read + o.st.read, publish: k.st.publish + o.st.publish}}
}

func timeBlock(b *testing.B, f pollBlock) block {
	c0, t0 := cpuTime(), time.Now()
	st, err := f(pairPolls)
	if err != nil {
		b.Fatal(err)
	}
	wall, cpu := time.Since(t0), cpuTime()-c0
	return block{wall: float64(wall) / pairPolls, cpu: float64(cpu) / pairPolls,
		st: stages{read: st.read / pairPolls, publish: st.publish / pairPolls}}
}

// BenchmarkDataPlane compares one poll of an 8-tag group plus its 8
// publishes through leasebridge's transports with the raw loop, at QoS 0
// and QoS 1, on one Modbus server and one mosquitto. The two loops are
// timed alternately: one operation is a pair of blocks of pairPolls polls,
// raw then leasebridge, and leasebridge first in every other pair, so
// load from other processes hits both alike. Each pair gives a throughput
// ratio (raw time / leasebridge time); a repetition reports their median,
// the mean time per poll of each loop and of its stages, the process CPU
// per poll, and the load average at its start and end.
func BenchmarkDataPlane(b *testing.B) {
	p := startDataPeers(b)
	for _, qos := range []byte{0, 1} {
		b.Run(fmt.Sprintf("qos%d", qos), func(b *testing.B) { pairedDataPlane(b, p, qos) })
	}
}

func pairedDataPlane(b *testing.B, p *dataPeers, qos byte) {
	raw, lb := openRaw(b, p, qos), openLB(b, p, qos)
	// One untimed block each: connections warm, topics cached.
	timeBlock(b, raw)
	timeBlock(b, lb)
	load0 := loadAvg(b)
	var ratio, cpuRatio []float64
	var rawSum, lbSum block
	reads := p.regs.reads.Load()
	b.ResetTimer()
	for i := range b.N {
		var r, l block
		if i%2 == 0 {
			r, l = timeBlock(b, raw), timeBlock(b, lb)
		} else {
			l, r = timeBlock(b, lb), timeBlock(b, raw)
		}
		ratio, cpuRatio = append(ratio, r.wall/l.wall), append(cpuRatio, r.cpu/max(l.cpu, 1))
		rawSum, lbSum = rawSum.add(r), lbSum.add(l)
	}
	b.StopTimer()
	if perPoll := float64(p.regs.reads.Load()-reads) / float64(2*pairPolls*b.N); perPoll != 1 {
		b.Fatalf("%.2f Modbus read requests per poll, want 1", perPoll)
	}
	// Means per poll: a block's stages add up to its time, and so do
	// their means.
	us := func(ns float64) float64 { return ns / float64(b.N) / 1e3 }
	m := map[string]float64{"pairs": float64(b.N), "polls_per_block": pairPolls, "ratio": median(ratio), "cpu_ratio": median(cpuRatio),
		"raw_us": us(rawSum.wall), "lb_us": us(lbSum.wall),
		"raw_read_us": us(float64(rawSum.st.read)), "lb_read_us": us(float64(lbSum.st.read)),
		"raw_publish_us": us(float64(rawSum.st.publish)), "lb_publish_us": us(float64(lbSum.st.publish)),
		"raw_cpu_us": us(rawSum.cpu), "lb_cpu_us": us(lbSum.cpu),
		"load1_start": load0, "load1_end": loadAvg(b)}
	b.ReportMetric(100*m["ratio"], "%-of-raw")
	b.ReportMetric(100*m["cpu_ratio"], "%-of-raw-cpu")
	b.ReportMetric(m["raw_us"], "raw-µs/poll")
	b.ReportMetric(m["lb_us"], "lb-µs/poll")
	b.ReportMetric(m["load1_end"], "load1")
	record(b, fmt.Sprintf("dataplane/qos%d/paired", qos), result{N: b.N, Metrics: m})
}

// dataplaneSection writes BenchmarkDataPlane's results, if it ran.
func dataplaneSection(rs resultSet, w func(string, ...any)) {
	if _, n := rs.metrics("dataplane/qos0/paired"); n == 0 {
		return
	}
	w("## Data plane: Modbus poll -> MQTT publish\n\n")
	w("`BenchmarkDataPlane` (`bench/dataplane_test.go`). One poll is one read of an %d-tag\n", dataTags)
	w("holding-register group (one Modbus read request, checked by the server's request counter) and\n")
	w("one publish per tag, each waited for (PUBACK at QoS 1), against one Modbus TCP server\n")
	w("(`simonvetter/modbus`, in the test process) and one mosquitto 2.0.11 on loopback.\n\n")
	w("- **raw**: `goburrow/modbus` `ReadHoldingRegisters` + `encoding/json` + `paho.mqtt.golang` `Publish`, the\n")
	w("  same payload fields as leasebridge's.\n")
	w("- **leasebridge**: `transports/modbus` `Poll` under an owner guard (the fence check before every\n")
	w("  request) + `transports/mqtt` `PublishValue` (epoch stamped) on each tag's topic, filled once\n")
	w("  from the route template, as `dataplane`'s poller does (`poller.once`, `poller.topic`).\n\n")
	w("The two loops are timed alternately, both connected throughout: a pair is a block of %.0f polls\n", pollsPerBlock(rs))
	w("of each, raw first in one pair and leasebridge first in the next, so load from other processes\n")
	w("hits both alike. Each pair gives a throughput ratio (raw time / leasebridge time); a repetition\n")
	w("(`-benchtime` of pairs) gives the median of its pairs' ratios and the mean time per poll of each\n")
	w("loop and of the poll's two stages, and the table shows, per QoS, the repetition whose ratio is the\n")
	w("median, with the machine's 1-minute load average at its start and end (2 cores). CPU is the whole\n")
	w("test process's (both clients, the Modbus server and a subscriber) per poll; each pair also gives a\n")
	w("CPU ratio (raw CPU / leasebridge CPU), the work each loop costs whatever waits for a core add. The\n")
	w("goal is judged on the wall-time ratio.\n\n")
	w("| QoS | loop | per poll (mean) | device read | %d publishes | CPU per poll | throughput vs raw, wall (median of pairs) | each repetition, wall | CPU ratio (median of pairs) | each repetition, CPU | load average | goal >= 95 %% |\n", dataTags)
	w("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, q := range []string{"qos0", "qos1"} {
		r, _, ok := rs.medianBy("dataplane/"+q+"/paired", "ratio")
		if !ok {
			continue
		}
		m := r.Metrics
		var walls, cpus []string
		for _, rep := range rs["dataplane/"+q+"/paired"] {
			walls = append(walls, fmt.Sprintf("%.1f %%", 100*rep.Metrics["ratio"]))
			cpus = append(cpus, fmt.Sprintf("%.1f %%", 100*rep.Metrics["cpu_ratio"]))
		}
		met := "met"
		if m["ratio"] < 0.95 {
			met = "not met"
		}
		qos := strings.TrimPrefix(q, "qos")
		w("| %s | raw | %.1f µs | %.1f µs | %.1f µs | %.1f µs | 100 %% | | | | | |\n", qos, m["raw_us"], m["raw_read_us"], m["raw_publish_us"], m["raw_cpu_us"])
		w("| %s | leasebridge | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %.1f %% | %s | %.1f %% | %s | %.2f -> %.2f | %s |\n", qos, m["lb_us"], m["lb_read_us"], m["lb_publish_us"], m["lb_cpu_us"],
			100*m["ratio"], strings.Join(walls, ", "), 100*m["cpu_ratio"], strings.Join(cpus, ", "), m["load1_start"], m["load1_end"], met)
	}
	w("\n")
	dataplaneProse(rs, w)
}

// dataplaneProse says where a poll's time goes, from the median
// repetitions' stages.
func dataplaneProse(rs resultSet, w func(string, ...any)) {
	r0, _, _ := rs.medianBy("dataplane/qos0/paired", "ratio")
	r1, _, ok := rs.medianBy("dataplane/qos1/paired", "ratio")
	if !ok {
		return
	}
	m0, m1 := r0.Metrics, r1.Metrics
	share := func(part, whole float64) float64 { return 100 * part / whole }
	w("Where a poll's time goes: at QoS 0 a leasebridge poll spends %.1f µs (%.0f %%) on the device's\n", m0["lb_read_us"], share(m0["lb_read_us"], m0["lb_us"]))
	w("request and reply and %.1f µs (%.0f %%) on its %d publishes, against the raw loop's %.1f µs and\n", m0["lb_publish_us"], share(m0["lb_publish_us"], m0["lb_us"]), dataTags, m0["raw_read_us"])
	w("%.1f µs; at QoS 1 the publishes, each waiting for its PUBACK, take %.0f %% of the poll (%.1f µs,\n", m0["raw_publish_us"], share(m1["lb_publish_us"], m1["lb_us"]), m1["lb_publish_us"])
	w("raw %.1f µs). A CPU profile of this benchmark (`go test -run '^$' -bench DataPlane -cpuprofile\n", m1["raw_publish_us"])
	w("/tmp/dataplane.cpu ./bench/`, then `go tool pprof -focus openLB`) puts both loops' time in the\n")
	w("socket system calls (the Modbus request and reply, one MQTT PUBLISH write each) and in paho's\n")
	w("`Publish`. What leasebridge adds per poll is the owner guard and the connection watch before\n")
	w("the request (`transports.Conn.BeginOp`), the tags decoded and scaled into values, and\n")
	w("`mqtt.EncodeValue` (no reflection, one allocation) where the raw loop calls `json.Marshal`.\n")
	w("A request's name for its errors is formatted only when there is an error: formatting it for\n")
	w("every request was an `fmt.Sprintf` per poll.\n\n")
}

// pollsPerBlock is the polls of each loop in a pair, as the run recorded.
func pollsPerBlock(rs resultSet) float64 {
	r, _, _ := rs.medianBy("dataplane/qos0/paired", "ratio")
	return r.Metrics["polls_per_block"]
}
