package routes_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"

	// The transports of every kind, which preflight.Build builds.
	_ "github.com/leasebridge/leasebridge/transports/all"
	"github.com/leasebridge/leasebridge/transports/modbus"
)

const base = `deployment_mode: clustered
lease_store:
  endpoints: [http://127.0.0.1:2379]
manager:
  failover_slo: 10m
  broker_health_step_down: 60s
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
  plc:
    kind: modbus_tcp
    address: 127.0.0.1:502
    groups:
      - name: g
        tags:
          - {name: t1, register: holding, address: 1, type: int16}
`

func parse(t *testing.T, y string) (*routes.Config, routes.Errors) {
	t.Helper()
	cfg, err := routes.Parse("cfg.yaml", []byte(y))
	if err == nil {
		return cfg, nil
	}
	var errs routes.Errors
	if !errors.As(err, &errs) || !errors.Is(err, routes.ErrInvalid) {
		t.Fatalf("error %v is not routes.Errors / ErrInvalid", err)
	}
	return nil, errs
}

// built builds cfg's transports as admit and run do (preflight.Build):
// routes holds no bound formula, its sessions carry what the transports
// report.
func built(t testing.TB, cfg *routes.Config) *preflight.Built {
	t.Helper()
	b, errs := preflight.Build(cfg, false)
	if len(errs) > 0 {
		t.Fatalf("preflight: %v", errs)
	}
	return b
}

func wantErrors(t *testing.T, y string, want ...string) {
	t.Helper()
	_, errs := parse(t, y)
	got := errs.Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("errors:\n%s\nlack %q", got, w)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d:\n%s", len(errs), len(want), got)
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	cfg, errs := parse(t, base+`routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	b := cfg.Brokers["local"]
	if b.ConnectTimeout.D() != routes.DefaultMQTTConnectTimeout || b.ReconcileTimeout.D() != routes.DefaultMQTTReconcileTimeout ||
		b.UnmatchedGrace.D() != routes.DefaultMQTTUnmatchedGrace || b.ClientID != routes.DefaultClientID || b.ProtocolVersion != 4 {
		t.Errorf("broker defaults: timeouts %s/%s/%s client %q version %d", b.ConnectTimeout.D(), b.ReconcileTimeout.D(), b.UnmatchedGrace.D(), b.ClientID, b.ProtocolVersion)
	}
	d := cfg.Devices["plc"]
	s := d.Settings.(*modbus.Config)
	if c, r, cl := d.Timeouts(); *s.UnitID != 1 || s.ByteOrder != "ABCD" || !*s.MergeRequests || c != routes.DefaultDeviceConnectTimeout || r != routes.DefaultDeviceRequestTimeout || cl != routes.DefaultDeviceCloseTimeout {
		t.Errorf("device defaults: unit %d order %s merge %v timeouts %s/%s/%s", *s.UnitID, s.ByteOrder, *s.MergeRequests, c, r, cl)
	}
	if cfg.LeaseStore.KeyPrefix != routes.DefaultKeyPrefix || cfg.Routes[0].Topic != routes.DefaultTopic {
		t.Errorf("prefix %q topic %q", cfg.LeaseStore.KeyPrefix, cfg.Routes[0].Topic)
	}
}

func TestUnknownKeyNamesFileLineAndPath(t *testing.T) {
	wantErrors(t, base+`routes:
  - name: r
    session: s
    kind: poll
    device: plc
    broker: local
    manager:
      lease_tll: 45s
`, `cfg.yaml:24:7: routes[0].manager.lease_tll: unknown key "lease_tll" (did you mean "lease_ttl"?)`)
}

func TestEveryDecodeErrorIsReported(t *testing.T) {
	wantErrors(t, `deployment_mode: clustered
lease_store:
  endpoints: http://x:1
  dial_timeout: 5
manager:
  lease_ttl: -3s
  max_renew_fails: three
  broker_health_step_down: 0s
  lease_ttl: 9s
brokers:
  local: {url: tcp://127.0.0.1:1883, keepalive: [1]}
`,
		`cfg.yaml:3:14: lease_store.endpoints: want a list, got "http://x:1"`,
		`cfg.yaml:4:17: lease_store.dial_timeout: invalid duration "5": missing unit (write 5s or 5ms)`,
		`cfg.yaml:6:14: manager.lease_ttl: invalid duration "-3s": must be >= 0`,
		`cfg.yaml:7:20: manager.max_renew_fails: want an integer, got "three"`,
		`cfg.yaml:8:28: manager.broker_health_step_down: want off or a positive duration, got "0s"`,
		`cfg.yaml:9:3: manager.lease_ttl: duplicate key (first at line 6)`,
		`cfg.yaml:11:49: brokers.local.keepalive: want a duration such as "30s", got a list`,
		// Validation still runs: the file has no routes either.
		`cfg.yaml:1:1: routes: no routes`,
	)
}

func TestSyntaxAndEmptyFiles(t *testing.T) {
	wantErrors(t, "a: [\n", `cfg.yaml:1:1: YAML syntax: did not find expected node content`)
	wantErrors(t, "", `cfg.yaml: the configuration is empty`)
	wantErrors(t, "- 1\n", `cfg.yaml:1:1: want a mapping, got a list`)
	wantErrors(t, "routes: &r [*r]\n", `cfg.yaml:1:9: routes[0]: want a mapping, got a list`)
}

func TestValidationNamesTheRule(t *testing.T) {
	wantErrors(t, base+`  plc2:
    kind: modbus_tcp
    address: "10.0.0.1:"
    groups:
      - name: g
        tags:
          - {name: x, address: "70000", type: int16}
routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`,
		`cfg.yaml:19:5: devices.plc2.address: address "10.0.0.1:": want host, host:port or [ipv6]:port with a port 1..65535`,
		`cfg.yaml:23:23: devices.plc2.groups[0].tags[0].address: address "70000": want a 0-based register number`,
	)
	// A structural error does not hide a rule broken elsewhere.
	wantErrors(t, base+"brokers2: {}\n", `cfg.yaml:17:1: brokers2: unknown key "brokers2" (did you mean "brokers"?)`,
		`cfg.yaml:1:1: routes: no routes`)
	wantErrors(t, base+`routes:
  - {name: r, session: "a/b", kind: poll, device: nope, broker: remote, qos: 3}
  - {name: r, session: s, kind: bridge, broker: local, remote: local}
`,
		`cfg.yaml:18:15: routes[0].session: session "a/b": no slashes or spaces`,
		`routes[0].qos: qos 3: want 0, 1 or 2`,
		`routes[0].broker: unknown broker "remote" (defined: local)`,
		`routes[0].device: unknown device "nope" (defined: plc)`,
		`cfg.yaml:19:6: routes[1].name: duplicate route name "r" (first in routes[0])`,
		`routes[1].remote: remote and broker are both "local": a bridge joins two brokers`,
		`cfg.yaml:19:5: routes[1]: topics is required for a bridge route`,
	)
}

func TestProtocolVersion5IsExplained(t *testing.T) {
	wantErrors(t, strings.Replace(base, "local: {url: tcp://127.0.0.1:1883}", "local: {url: tcp://127.0.0.1:1883, protocol_version: 5}", 1)+`routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`, `brokers.local.protocol_version: protocol_version 5: the paho.mqtt.golang client speaks MQTT 3.1 (3) and 3.1.1 (4) only`)
}

func TestModbusTagRules(t *testing.T) {
	y := strings.Replace(base, "- {name: t1, register: holding, address: 1, type: int16}", `- {name: t1, register: coil, address: 1, type: int16}
          - {name: t2, register: holding, address: 70000, type: bool}
          - {name: t2, register: input, address: 3, type: float32, writable: true, byte_order: XYZW}
          - {name: t4, register: holding, address: 4, type: string}`, 1) + `routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`
	wantErrors(t, y,
		`tags[0].type: a coil register holds one bit: type must be bool`,
		`tags[1].address: address "70000": want a 0-based register number 0..65535`,
		`tags[1].bit: a bool in a holding register needs bit (0..15)`,
		`tags[2].name: duplicate tag name "t2" on this device`,
		`tags[2].byte_order: byte_order "XYZW": want ABCD, DCBA, BADC or CDAB`,
		`tags[2].writable: input registers are read-only in Modbus`,
		`tags[3].length: a string tag needs length > 0`,
	)
}

// Two routes of one session that disagree are refused, naming the session,
// the field, both routes and both values.
func TestDivergenceIsRefusedWithBothRoutes(t *testing.T) {
	cfg, errs := parse(t, base+`routes:
  - name: b-writes
    session: plc
    kind: write
    device: plc
    broker: local
    request_topic: req
    reply_topic: resp
    manager: {lease_ttl: 30s, failover_slo: 5m}
  - {name: a-poll, session: plc, kind: poll, device: plc, broker: local}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	reps := built(t, cfg).Admit()
	if len(reps) != 1 || reps[0].Admitted() {
		t.Fatalf("reports %+v", reps)
	}
	got := strings.Join(reps[0].Refusals, "\n")
	for _, want := range []string{
		`session "plc": routes disagree on lease_ttl: route "a-poll" (cfg.yaml:26) gives 45s, route "b-writes" (cfg.yaml:18) gives 30s`,
		`routes disagree on renew_interval:`,
		`routes disagree on failover_slo: route "a-poll" (cfg.yaml:26) gives 600s, route "b-writes" (cfg.yaml:18) gives 300s`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("refusals:\n%s\nlack %q", got, want)
		}
	}
}

var lineRef = regexp.MustCompile(`cfg\.yaml:\d+`)

// Route order never changes the outcome: the same routes shuffled give the
// same sessions, budgets and refusals (positions aside, which move with the
// text).
func TestRouteOrderNeverChangesOutcome(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	overrides := []string{"", "lease_ttl: 30s", "lease_ttl: 45s", "renew_interval: 10s", "failover_slo: 5m", "broker_health_step_down: off", "startup_allowance: 1s", "acquire_poll_interval: 2s"}
	for trial := 0; trial < 300; trial++ {
		var rs []string
		for i := 0; i < 2+rng.IntN(6); i++ {
			kind := "kind: poll, device: plc"
			if rng.IntN(3) == 0 {
				// Its own request topic: one session subscribes each once.
				kind = fmt.Sprintf("kind: write, device: plc, request_topic: q%d, reply_topic: p", i)
			}
			rs = append(rs, fmt.Sprintf("  - {name: r%d, session: s%d, %s, broker: local, manager: {%s}}\n",
				i, rng.IntN(3), kind, overrides[rng.IntN(len(overrides))]))
		}
		outcome := func(lines []string) string {
			cfg, errs := parse(t, base+"routes:\n"+strings.Join(lines, ""))
			if errs != nil {
				t.Fatal(errs)
			}
			var b strings.Builder
			bt := built(t, cfg)
			for i, r := range bt.Admit() {
				fmt.Fprintf(&b, "%s %v %+v %+v %v\n", r.Session, bt.Sessions()[i].Routes, r.OwnerDeath, r.BrokerPath, r.Refusals)
			}
			return lineRef.ReplaceAllString(b.String(), "cfg.yaml:L")
		}
		want := outcome(rs)
		shuffled := append([]string(nil), rs...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := outcome(shuffled); got != want {
			t.Fatalf("trial %d: order changed the outcome\nin order:\n%s\nshuffled:\n%s", trial, want, got)
		}
	}
}

func TestSessionInputsCarryTransportsAndPolicy(t *testing.T) {
	cfg, errs := parse(t, base+`routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local, manager: {startup_allowance: 2s}}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	s := built(t, cfg).Sessions()[0]
	want := []admission.Activation{
		{Name: routes.EndpointClaim, Entry: routes.EndpointClaim, Bound: 3 * time.Second, // the clustered renew_call_timeout
			Parts: []admission.Part{{Key: "renew_call_timeout", Count: 1, Each: 3 * time.Second}}},
		{Name: "modbus_tcp:plc", Entry: "devices.plc", Bound: 7 * time.Second, Close: time.Second,
			Parts: []admission.Part{{Key: "connect_timeout", Count: 1, Each: 5 * time.Second}, {Key: "request_timeout", Count: 1, Each: 2 * time.Second}}},
		{Name: "mqtt:local", Entry: "brokers.local", Bound: 240 * time.Second, Close: time.Second,
			Parts: admission.MQTTActivationParts(30*time.Second, 30*time.Second, 30*time.Second)},
	}
	if !reflect.DeepEqual(s.Inputs.Transports, want) {
		t.Errorf("transports %+v, want %+v", s.Inputs.Transports, want)
	}
	if s.Inputs.StartupAllowance != 2*time.Second || s.Inputs.BrokerHealth.Threshold != time.Minute || *s.Inputs.FailoverSLO != 10*time.Minute {
		t.Errorf("inputs %+v", s.Inputs)
	}
	r := built(t, cfg).Admit()[0]
	if !r.Admitted() || r.OwnerDeath.Total != 45*time.Second+12500*time.Millisecond+39*time.Second+250*time.Second+2*time.Second {
		t.Errorf("report %+v", r)
	}
}

func TestOneSessionCannotUseOneClientIDTwice(t *testing.T) {
	y := strings.Replace(base, "local: {url: tcp://127.0.0.1:1883}", "local: {url: tcp://127.0.0.1:1883}\n  again: {url: tcp://127.0.0.1:1883}", 1) + `routes:
  - {name: r, session: s, kind: bridge, remote: again, broker: local, topics: [{from: "a/#"}]}
`
	wantErrors(t, y, `routes[0]: session "s" uses brokers "local" and "again", both tcp://127.0.0.1:1883 with client id "leasebridge-s"`)
	ok := strings.Replace(y, "again: {url: tcp://127.0.0.1:1883}", "again: {url: tcp://127.0.0.1:1883, client_id: \"up-{session}\"}", 1)
	if _, errs := parse(t, ok); errs != nil {
		t.Fatal(errs)
	}
}

// A write route defaults to QoS 1, max_age and clock_skew; an explicit qos
// 0 and clock_skew 0 stay; the keys belong to write routes only.
func TestWriteRouteDefaults(t *testing.T) {
	cfg, errs := parse(t, base+`routes:
  - {name: w, session: s, kind: write, device: plc, broker: local, request_topic: q, reply_topic: a}
  - {name: w0, session: s0, kind: write, device: plc, broker: local, request_topic: q0, reply_topic: a0, qos: 0, clock_skew: 0s, max_age: 3s}
  - {name: p, session: s, kind: poll, device: plc, broker: local}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	w, w0, p := cfg.Routes[0], cfg.Routes[1], cfg.Routes[2]
	if w.QoS != routes.DefaultWriteQoS || w.MaxAge.D() != routes.DefaultWriteMaxAge || w.ClockSkew.D() != routes.DefaultWriteClockSkew {
		t.Errorf("write defaults: qos %d max_age %s clock_skew %s", w.QoS, w.MaxAge.D(), w.ClockSkew.D())
	}
	if w0.QoS != 0 || w0.ClockSkew != 0 || w0.MaxAge.D() != 3*time.Second {
		t.Errorf("explicit values: qos %d clock_skew %s max_age %s", w0.QoS, w0.ClockSkew.D(), w0.MaxAge.D())
	}
	if p.QoS != 0 || p.MaxAge != 0 {
		t.Errorf("poll route: qos %d max_age %s", p.QoS, p.MaxAge.D())
	}
	wantErrors(t, base+`routes:
  - {name: p, session: s, kind: poll, device: plc, broker: local, max_age: 5s}
  - {name: w, session: s, kind: write, device: plc, broker: local, request_topic: q, reply_topic: a, max_age: 0s}
`,
		`routes[0].max_age: max_age applies to write routes only`,
		`routes[1].max_age: max_age 0s: want a duration above 0`,
	)
}

// device_path_step_down is off or a positive duration, like
// broker_health_step_down; a route may override the file's, and routes of
// one session that disagree on it or on the cooldown are refused.
func TestDevicePathSetting(t *testing.T) {
	_, errs := parse(t, strings.Replace(base, "broker_health_step_down: 60s", "broker_health_step_down: 60s\n  device_path_step_down: 0s", 1)+
		"routes:\n  - {name: a, session: s, kind: poll, device: plc, broker: local}\n")
	if len(errs) != 1 || !strings.Contains(errs.Error(), `cfg.yaml:7:26: manager.device_path_step_down: want off or a positive duration, got "0s"`) {
		t.Errorf("device_path_step_down: 0s: %v", errs)
	}
	// One device per session: a device is exclusive to one session.
	extra := ""
	for _, n := range []string{"2", "3"} {
		extra += "  plc" + n + ":\n    kind: modbus_tcp\n    address: 127.0.0." + n + ":502\n    groups:\n      - name: g\n        tags:\n          - {name: t1, register: holding, address: 1, type: int16}\n"
	}
	cfg, errs := parse(t, strings.Replace(base, "broker_health_step_down: 60s", "broker_health_step_down: 60s\n  device_path_step_down: 30s", 1)+extra+`routes:
  - {name: a, session: s, kind: poll, device: plc, broker: local}
  - {name: b, session: quiet, kind: poll, device: plc2, broker: local, manager: {device_path_step_down: off}}
  - {name: c, session: x, kind: poll, device: plc3, broker: local, manager: {device_path_cooldown: 45s}}
  - {name: d, session: x, kind: poll, device: plc3, broker: local}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	reps := built(t, cfg).Admit()
	byName := map[string]admission.Report{}
	for _, r := range reps {
		byName[r.Session] = r
	}
	if r := byName["s"]; !r.Admitted() || r.DevicePath == nil || r.DevicePathFailover != "on" || r.DevicePathCooldown != 30*time.Second {
		t.Errorf("inherited device_path_step_down 30s: %+v", r)
	}
	if r := byName["quiet"]; !r.Admitted() || r.DevicePath != nil || r.DevicePathFailover != "off" {
		t.Errorf("route device_path_step_down off: %+v", r)
	}
	if r := byName["x"]; r.Admitted() || !strings.Contains(strings.Join(r.Refusals, "\n"), "routes disagree on device_path_cooldown") {
		t.Errorf("routes disagreeing on device_path_cooldown: %v", r.Refusals)
	}
}
