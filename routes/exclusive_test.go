package routes_test

import (
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

func TestEndpointIdentityPerKind(t *testing.T) {
	for _, c := range []struct {
		kind, addr  string
		id          string
		local, fail bool
	}{
		{kind: "modbus_tcp", addr: "PLC.local:502", id: "modbus_tcp://plc.local:502"},
		{kind: "modbus_tcp", addr: "plc.local", id: "modbus_tcp://plc.local:502"},
		{kind: "modbus_tcp", addr: "plc.local.:0502", id: "modbus_tcp://plc.local:502"},
		{kind: "modbus_tcp", addr: "plc.local:503", id: "modbus_tcp://plc.local:503"},
		{kind: "modbus_tcp", addr: "127.0.0.1:502", id: "modbus_tcp://localhost:502", local: true},
		{kind: "modbus_tcp", addr: "LOCALHOST", id: "modbus_tcp://localhost:502", local: true},
		{kind: "modbus_tcp", addr: "[::1]:502", id: "modbus_tcp://localhost:502", local: true},
		{kind: "modbus_tcp", addr: "127.0.0.2:502", id: "modbus_tcp://127.0.0.2:502"},
		{kind: "modbus_tcp", addr: "[::FFFF:10.0.0.5]:502", id: "modbus_tcp://10.0.0.5:502"},
		{kind: "modbus_tcp", addr: "[2001:DB8:0::1]:502", id: "modbus_tcp://[2001:db8::1]:502"},
		{kind: "modbus_tcp", addr: "2001:db8::1", fail: true},
		{kind: "modbus_tcp", addr: "plc:0", fail: true},
		{kind: "modbus_tcp", addr: "plc:", fail: true},
		{kind: "modbus_rtu", addr: "/dev/ttyUSB0", id: "modbus_rtu:/dev/ttyUSB0", local: true},
		{kind: "modbus_rtu", addr: "/dev/../dev/ttyUSB0/", id: "modbus_rtu:/dev/ttyUSB0", local: true},
	} {
		ep, err := (&routes.Device{Kind: c.kind, Address: c.addr}).Endpoint()
		if c.fail {
			if err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s %q: endpoint %+v, err %v: want an error without the password", c.kind, c.addr, ep, err)
			}
			continue
		}
		if err != nil || ep.ID != c.id || ep.NodeLocal != c.local {
			t.Errorf("%s %q: endpoint %+v, err %v; want %q, node-local %v", c.kind, c.addr, ep, err, c.id, c.local)
		}
	}
}

// exclusiveBase has no devices; each test adds its own.
const exclusiveBase = transporttest.ConfigHead

func device(name, kind, addr string, extra string) string {
	return "  " + name + ": {kind: " + kind + ", address: \"" + addr + "\"" + extra +
		", groups: [{name: g, tags: [{name: t, address: \"" + map[string]string{"modbus_tcp": "1", "modbus_rtu": "1"}[kind] +
		"\", type: int16" + map[bool]string{true: ", register: holding", false: ""}[strings.HasPrefix(kind, "modbus")] + "}]}]}\n"
}

func admitRefusals(t *testing.T, y string) map[string][]string {
	t.Helper()
	cfg, errs := parse(t, y)
	if errs != nil {
		t.Fatal(errs)
	}
	out := map[string][]string{}
	for _, r := range built(t, cfg).Admit() {
		if r.OwnerDeath.Total == 0 {
			t.Errorf("session %s: no budget computed: %v", r.Session, r.Refusals)
		}
		out[r.Session] = r.Refusals
	}
	return out
}

func TestDeviceOfTwoSessionsIsRefusedNamingBoth(t *testing.T) {
	y := exclusiveBase + device("press", "modbus_tcp", "10.0.0.5:502", "") + `routes:
  - {name: telemetry, session: press-a, kind: poll, device: press, broker: local}
  - {name: commands, session: press-b, kind: write, device: press, broker: local, request_topic: q, reply_topic: p}
  - {name: more, session: press-b, kind: poll, device: press, broker: local}
`
	got := admitRefusals(t, y)
	want := `device "press" (cfg.yaml:7) is used by session "press-a" (route "telemetry", cfg.yaml:9) and session "press-b" (route "commands", cfg.yaml:10): their owners can be two nodes, two clients of one device; put both routes in one session to run them in one process`
	for _, s := range []string{"press-a", "press-b"} {
		if len(got[s]) != 1 || got[s][0] != want {
			t.Errorf("session %s refusals %q, want [%q]", s, got[s], want)
		}
	}
	if got := admitRefusals(t, strings.ReplaceAll(y, "press-b", "press-a")); len(got["press-a"]) != 0 {
		t.Errorf("one session: refused %q", got["press-a"])
	}
}

func TestDeviceEntriesWithOneEndpointAreRefused(t *testing.T) {
	for _, c := range []struct {
		name     string
		a, b     string // device lines
		endpoint string // "" when distinct
	}{
		{name: "modbus_tcp default port", a: device("a", "modbus_tcp", "PLC.local:502", ""), b: device("b", "modbus_tcp", "plc.local", ""), endpoint: "modbus_tcp://plc.local:502"},
		{name: "modbus_tcp loopback names", a: device("a", "modbus_tcp", "127.0.0.1:1502", ""), b: device("b", "modbus_tcp", "localhost:1502", ", unit_id: 2"), endpoint: "modbus_tcp://localhost:1502"},
		{name: "modbus_tcp other port", a: device("a", "modbus_tcp", "plc.local:502", ""), b: device("b", "modbus_tcp", "plc.local:503", "")},
		{name: "modbus_rtu two units on one line", a: device("a", "modbus_rtu", "/dev/ttyUSB0", ", unit_id: 1"), b: device("b", "modbus_rtu", "/dev/./ttyUSB0", ", unit_id: 2"), endpoint: "modbus_rtu:/dev/ttyUSB0"},
		{name: "modbus_rtu other line", a: device("a", "modbus_rtu", "/dev/ttyUSB0", ""), b: device("b", "modbus_rtu", "/dev/ttyUSB1", "")},
	} {
		const sb = "sb"
		y := exclusiveBase + c.a + c.b + `routes:
  - {name: ra, session: sa, kind: poll, device: a, broker: local}
  - {name: rb, session: ` + sb + `, kind: poll, device: b, broker: local}
`
		got := admitRefusals(t, y)
		if c.endpoint == "" {
			if len(got["sa"])+len(got["sb"]) != 0 {
				t.Errorf("%s: distinct endpoints refused: %q", c.name, got)
			}
			continue
		}
		want := `devices "a" (cfg.yaml:7, session sa) and "b" (cfg.yaml:8, session ` + sb + `) are both endpoint ` + c.endpoint + `: each entry opens its own connection, two clients of one device; define the device once, as one entry holding every tag, and put every route using it in one session to run them in one process`
		for _, s := range []string{"sa", sb} {
			if len(got[s]) != 1 || got[s][0] != want {
				t.Errorf("%s: session %s refusals %q, want [%q]", c.name, s, got[s], want)
			}
			if strings.Contains(strings.Join(got[s], ""), "s3cret") {
				t.Errorf("%s: a password reached a refusal", c.name)
			}
		}
	}
}

func TestBrokerClientIDOfTwoSessionsIsRefused(t *testing.T) {
	y := strings.Replace(exclusiveBase, "local: {url: tcp://127.0.0.1:1883}", "local: {url: tcp://127.0.0.1:1883}\n  cloud: {url: ssl://Cloud.example:8883, client_id: \"uplink-{node}\"}", 1) + `
node: n1
routes:
  - {name: up-a, session: a, kind: bridge, broker: local, remote: cloud, topics: [{from: "a/#"}]}
  - {name: up-b, session: b, kind: bridge, broker: local, remote: cloud, topics: [{from: "b/#"}]}
`
	y = strings.Replace(y, "devices:\n", "", 1)
	got := admitRefusals(t, y)
	want := `session "a" (route "up-a", cfg.yaml:10) and session "b" (route "up-b", cfg.yaml:11) both connect to MQTT broker cloud.example:8883 with client id "uplink-n1"`
	for _, s := range []string{"a", "b"} {
		if len(got[s]) != 1 || !strings.HasPrefix(got[s][0], want) {
			t.Errorf("session %s refusals %q, want [%q...]", s, got[s], want)
		}
	}
	if got := admitRefusals(t, strings.Replace(y, "uplink-{node}", "uplink-{session}", 1)); len(got["a"])+len(got["b"]) != 0 {
		t.Errorf("client ids with {session}: refused %q", got)
	}
}

func TestClientID(t *testing.T) {
	if got := routes.ClientID("lb-{session}-{node}-{session}", "s1", "n2"); got != "lb-s1-n2-s1" {
		t.Errorf("ClientID = %q, want lb-s1-n2-s1", got)
	}
	if got := routes.ClientID(routes.DefaultClientID, "s1", "n2"); got != "leasebridge-s1" {
		t.Errorf("default client id = %q", got)
	}
	// One pass: a name holding a placeholder is not expanded again, and a
	// brace that starts no placeholder is kept.
	if got := routes.ClientID("{x}{session}{{node}}-{nod", "{node}", "n2"); got != "{x}{node}{n2}-{nod" {
		t.Errorf("ClientID = %q, want {x}{node}{n2}-{nod", got)
	}
}
