package routes_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/modbus"
)

// The malformed files below each once passed silently, lost their
// position or hid another problem.

func TestSecondDocumentIsRefused(t *testing.T) {
	y := base + "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n---\nnode: other\n"
	_, errs := parse(t, y)
	if len(errs) != 1 || errs[0].Line != 18 || !strings.Contains(errs[0].Message, "second YAML document") {
		t.Fatalf("errors: %v", errs)
	}
}

func TestSyntaxErrorKeepsPosition(t *testing.T) {
	for name, y := range map[string]string{
		"json-looking": "{\"deployment_mode\": \"clustered\",\n \"node\": [1,\n}\n",
		"tab indent":   "deployment_mode: clustered\nmanager:\n\tfailover_slo: 1m\n",
	} {
		_, errs := parse(t, y)
		if len(errs) != 1 || errs[0].Line == 0 {
			t.Errorf("%s: want one positioned syntax error, got %v", name, errs)
		}
	}
}

func TestNonUTF8ValueKeepsPosition(t *testing.T) {
	y := base + "node: \"ab\xffcd\"\n"
	_, errs := parse(t, y)
	if len(errs) != 1 || errs[0].Line != 17 || errs[0].Column != 10 || !strings.Contains(errs[0].Message, "UTF-8") {
		t.Fatalf("errors: %v", errs)
	}
}

func TestClusteredWithoutEndpointsHasAPosition(t *testing.T) {
	y := strings.Replace(base, "lease_store:\n  endpoints: [http://127.0.0.1:2379]\n", "", 1) +
		"routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n"
	_, errs := parse(t, y)
	if len(errs) != 1 || errs[0].Line != 1 || !strings.Contains(errs[0].Message, "etcd endpoints") {
		t.Fatalf("errors: %v", errs)
	}
}

func TestHugeScalarIsNotEchoed(t *testing.T) {
	huge := strings.Repeat("x", 10<<20)
	for name, y := range map[string]string{
		"value": base + "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local, publish: " + huge + "}\n",
		"key":   base + huge + ": 1\nroutes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n",
		"int":   base + "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\nhttp_listen: [" + huge + "]\n",
		// A DeploymentMode, not a string: it was echoed whole.
		"mode": strings.Replace(base, "deployment_mode: clustered", "deployment_mode: "+huge, 1) +
			"routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n",
	} {
		_, errs := parse(t, y)
		if len(errs) == 0 {
			t.Fatalf("%s: no error", name)
		}
		if n := len(errs.Error()); n > 2000 {
			t.Errorf("%s: error is %d bytes, want a bounded echo", name, n)
		}
	}
}

// A report lists the first routes.MaxProblems problems in file order and
// counts the rest; a message longer than routes.MaxMessage, however it was
// made, is clipped where it is listed.
func TestReportedProblemsAreBounded(t *testing.T) {
	const n = 1000
	var sb strings.Builder
	sb.WriteString(base + "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n")
	for i := range n {
		fmt.Fprintf(&sb, "unknown_%d: 1\n", i)
	}
	_, errs := parse(t, sb.String())
	if len(errs) != n {
		t.Fatalf("%d problems, want %d", len(errs), n)
	}
	shown, more := errs.Shown()
	if len(shown) != routes.MaxProblems || more != n-routes.MaxProblems {
		t.Fatalf("Shown: %d listed, %d more; want %d and %d", len(shown), more, routes.MaxProblems, n-routes.MaxProblems)
	}
	for i, e := range shown {
		if want := fmt.Sprintf("unknown_%d", i); e.Path != want {
			t.Fatalf("listed problem %d is at %s, want %s (file order)", i, e.Path, want)
		}
	}
	lines := strings.Split(errs.Error(), "\n")
	if len(lines) != routes.MaxProblems+1 || lines[len(lines)-1] != routes.MoreProblems(n-routes.MaxProblems) {
		t.Errorf("Error() has %d lines, ending %q", len(lines), lines[len(lines)-1])
	}
	long := routes.Errors{{File: "f", Message: "transport says: " + strings.Repeat("y", 10<<20)}}
	listed, _ := long.Shown()
	if got := len(listed[0].Message); got > routes.MaxMessage+32 || !strings.HasSuffix(listed[0].Message, fmt.Sprintf("...(%d bytes)", len(long[0].Message))) {
		t.Errorf("a 10 MB message is listed with %d bytes, ending %q", got, listed[0].Message[max(0, got-40):])
	}
	if len(long[0].Message) != 16+10<<20 {
		t.Error("Shown changed the problem it clipped")
	}
}

func TestDecodeProblemDoesNotHideValidation(t *testing.T) {
	// A wrong type at one key and a rule broken at another: both reported.
	y := base + "http_listen: [1]\nroutes:\n  - {name: r, session: s, kind: poll, device: nope, broker: local}\n"
	wantErrors(t, y, "http_listen: want a string", `unknown device "nope"`)
}

func TestDecodeProblemIsNotReportedTwice(t *testing.T) {
	// lease_ttl fails to decode; validation must not add "must be > 0" for it.
	y := base + "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local, manager: {lease_ttl: 10}}\n"
	wantErrors(t, y, "missing unit")
}

func TestHexRegisterAddress(t *testing.T) {
	y := strings.Replace(base, "address: 1, type: int16", `address: "0x64", type: int16`, 1) +
		"routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n"
	if _, errs := parse(t, y); errs != nil {
		t.Fatalf("hex address refused: %v", errs)
	}
	y = strings.Replace(base, "address: 1, type: int16", `address: "0x10000", type: int16`, 1) +
		"routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n"
	wantErrors(t, y, `address "0x10000"`)
}

func TestTopicRules(t *testing.T) {
	cases := []struct{ route, want string }{
		{"{name: r, session: s, kind: poll, device: plc, broker: local, topic: 'a/+/b'}", "topic"},
		{"{name: r, session: s, kind: poll, device: plc, broker: local, topic: 'a/#'}", "topic"},
		{"{name: r, session: s, kind: write, device: plc, broker: local, request_topic: 'a/#/b', reply_topic: r}", "request_topic"},
		{"{name: r, session: s, kind: write, device: plc, broker: local, request_topic: 'a+', reply_topic: r}", "request_topic"},
		{"{name: r, session: s, kind: write, device: plc, broker: local, request_topic: req, reply_topic: 'r/+'}", "reply_topic"},
		{"{name: r, session: s, kind: bridge, broker: local, remote: cloud, topics: [{from: 'a/#/b', direction: out}]}", "from"},
		{"{name: r, session: s, kind: bridge, broker: local, remote: cloud, topics: [{from: 'x/#', to: 'y/#', direction: out}]}", "to"},
	}
	for _, c := range cases {
		y := strings.Replace(base, "brokers:\n", "brokers:\n  cloud: {url: tcp://127.0.0.1:1884}\n", 1) + "routes:\n  - " + c.route + "\n"
		_, errs := parse(t, y)
		if len(errs) != 1 || !strings.Contains(errs[0].Path, c.want) {
			t.Errorf("%s: want one error at %s, got %v", c.route, c.want, errs)
		}
	}
}

// BenchmarkUnknownKeys decodes one mapping with n unknown keys. The time
// per key should not grow with n (it once did: 40,000 keys took 7.4 s).
// A device's mapping goes through its kind's keys too.
func BenchmarkUnknownKeys(b *testing.B) {
	for _, c := range []struct {
		where, indent string
		n             int
	}{{"manager", "  ", 10_000}, {"manager", "  ", 100_000}, {"device", "    ", 10_000}, {"device", "    ", 100_000}} {
		var sb strings.Builder
		sb.WriteString(base)
		if c.where == "manager" {
			sb.WriteString("manager:\n")
		}
		for i := range c.n {
			fmt.Fprintf(&sb, "%sk%d: 1\n", c.indent, i)
		}
		data, n := []byte(sb.String()), c.n
		b.Run(fmt.Sprintf("%s/keys=%d", c.where, n), func(b *testing.B) {
			for b.Loop() {
				if _, err := routes.Parse("cfg.yaml", data); err == nil {
					b.Fatal("no error")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
		})
	}
}

// docs/devices.md promises holding as the default Modbus register.
func TestModbusRegisterDefaultsToHolding(t *testing.T) {
	y := strings.Replace(base, "register: holding, ", "", 1) + "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n"
	cfg, errs := parse(t, y)
	if errs != nil {
		t.Fatal(errs)
	}
	if got := cfg.Devices["plc"].Groups[0].Tags[0].Settings.(*modbus.TagConfig).Register; got != modbus.DefaultRegister {
		t.Errorf("register %q, want %q", got, modbus.DefaultRegister)
	}
}

// Routes of one session may use different devices: the owner opens all of
// them, and admission sums every bound once.
func TestSessionOpensTheUnionOfItsRoutes(t *testing.T) {
	y := base + `  plc2:
    kind: modbus_tcp
    address: 127.0.0.2:502
    groups:
      - name: g
        tags:
          - {name: t1, register: holding, address: 1, type: int16}
routes:
  - {name: a, session: s, kind: poll, device: plc, broker: local}
  - {name: b, session: s, kind: poll, device: plc2, broker: local}
  - {name: c, session: s, kind: write, device: plc, broker: local, request_topic: w, reply_topic: r}
`
	cfg, errs := parse(t, y)
	if errs != nil {
		t.Fatal(errs)
	}
	ss := built(t, cfg).Sessions()
	if len(ss) != 1 || len(ss[0].Refusals) != 0 {
		t.Fatalf("sessions %+v", ss)
	}
	var names []string
	for _, a := range ss[0].Inputs.Transports {
		names = append(names, a.Name)
	}
	if got := strings.Join(names, " "); got != routes.EndpointClaim+" modbus_tcp:plc modbus_tcp:plc2 mqtt:local" {
		t.Fatalf("transports %q", got)
	}
	r := built(t, cfg).Admit()[0]
	var want time.Duration
	for _, a := range ss[0].Inputs.Transports {
		want += a.Bound
	}
	if r.Activation != want {
		t.Fatalf("activation %v, want %v", r.Activation, want)
	}
}

// A misspelt key is suggested among the keys of the device's own kind
// (transports/opcua and transports/s7 test the keys of another kind).
func TestKeysOfAnotherKindAreRefused(t *testing.T) {
	wantErrors(t, strings.Replace(base, "    kind: modbus_tcp\n", "    kind: modbus_tcp\n    unit_di: 2\n", 1)+
		"routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n",
		`cfg.yaml:12:5: devices.plc.unit_di: unknown key "unit_di" (did you mean "unit_id"?)`)
}
