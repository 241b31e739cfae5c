package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/admission/admissiontest"
	"github.com/leasebridge/leasebridge/internal/report"
)

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, y string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func decodeAdmission(t *testing.T, s string) report.Admission {
	t.Helper()
	var a report.Admission
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("admit --json printed invalid JSON: %v\n%s", err, s)
	}
	return a
}

// Every shipped example is admitted, in text and in JSON.
func TestAdmitEveryExample(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		if code, out, errs := runCmd(t, "admit", "-c", f); code != exitOK || !strings.Contains(out, "session(s) admitted") {
			t.Errorf("admit %s: exit %d\n%s%s", f, code, out, errs)
		}
		code, out, _ := runCmd(t, "admit", "-c", f, "--json")
		a := decodeAdmission(t, out)
		if code != exitOK || !a.Admitted || len(a.Sessions) == 0 || len(a.Errors) != 0 {
			t.Errorf("admit --json %s: exit %d %+v", f, code, a)
		}
		for _, s := range a.Sessions {
			if s.OwnerDeathNS == nil || s.Terms["owner_death"]["lease_ttl"] != int64(s.Timing.LeaseTTL) || s.BrokerPathFailover == "undecided" {
				t.Errorf("%s session %s: %+v", f, s.Session, s)
			}
		}
	}
}

func TestAdmitExitStatuses(t *testing.T) {
	refused := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {failover_slo: 5m}
brokers: {local: {url: "tcp://127.0.0.1:1883"}}
routes:
  - {name: bridge, session: up, kind: bridge, broker: local, remote: far, topics: [{from: "a/#"}]}
brokers_typo: 1
`)
	code, _, errs := runCmd(t, "admit", "-c", refused)
	if code != exitInvalid || !strings.Contains(errs, `cfg.yaml:7:1: brokers_typo: unknown key "brokers_typo"`) {
		t.Errorf("invalid config: exit %d, stderr:\n%s", code, errs)
	}
	code, out, _ := runCmd(t, "admit", "-c", refused, "--json")
	a := decodeAdmission(t, out)
	// Both problems at once: the unknown key and the undefined remote.
	if code != exitInvalid || a.Admitted || len(a.Errors) != 2 || a.Errors[0].Path != "routes[0].remote" || a.Errors[1].Line != 7 || a.Errors[1].Path != "brokers_typo" {
		t.Errorf("invalid --json: exit %d %+v", code, a)
	}

	cfg := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {failover_slo: 5m}
brokers: {local: {url: "tcp://127.0.0.1:1883"}}
routes:
  - {name: pub, session: s, kind: poll, device: d, broker: local}
devices:
  d: {kind: modbus_tcp, address: "127.0.0.1:502"}
`)
	code, out, _ = runCmd(t, "admit", "-c", cfg)
	if code != exitRefused || !strings.Contains(out, "refused: failover_slo = 300s is declared but broker_health_step_down is omitted") ||
		!strings.Contains(out, "refused: owner-death budget 346.5s exceeds failover_slo 300s by 46.5s (largest terms: activation 250s = 72.2%") {
		t.Errorf("refused: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(t, "admit", "-c", cfg, "--json")
	a = decodeAdmission(t, out)
	s := a.Sessions[0]
	if code != exitRefused || a.Admitted || s.Admitted || s.BrokerPathNS != nil || s.BrokerPathFailover != "undecided" ||
		*s.FailoverSLONS != int64(5*time.Minute) || *s.OwnerDeathNS != int64(346500*time.Millisecond) || len(s.Refusals) != 2 {
		t.Errorf("refused --json: exit %d %+v", code, s)
	}

	if code, _, errs := runCmd(t, "admit", "-c", filepath.Join(t.TempDir(), "missing.yaml")); code != exitInvalid || !strings.Contains(errs, "missing.yaml") {
		t.Errorf("missing file: exit %d %s", code, errs)
	}
	if code, _, _ := runCmd(t, "admit"); code != exitInvalid {
		t.Errorf("admit without -c: exit %d", code)
	}
	if code, _, _ := runCmd(t, "admit", "-c", cfg, "extra"); code != exitInvalid {
		t.Errorf("stray argument: exit %d", code)
	}
}

// admit --json agrees to the nanosecond with the formulas of
// docs/failover-budget.md, evaluated independently in arbitrary precision
// (admission/admissiontest), on random explicit configurations.
func TestAdmitJSONAgreesWithFormulas(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	for trial := 0; trial < 200; trial++ {
		l, r, j, c := ms(2000, 600000), ms(1, 60000), ms(0, 20000), ms(1, 10000)
		p, g, s, b := ms(1, 30000), ms(0, 30000), ms(0, 60000), ms(1, 600000)
		ct, rt, ug := ms(1, 60000), ms(1, 60000), ms(0, 60000)
		dc, dr := ms(1, 10000), ms(1, 10000)
		// Every other trial with spread: the owner-death budget then holds
		// the takeover deferral as a term of its own.
		spread := trial%2 == 1
		y := fmt.Sprintf(`deployment_mode: clustered
spread: %t
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager:
  lease_ttl: %s
  renew_interval: %s
  lease_renew_jitter: %s
  renew_call_timeout: %s
  acquire_poll_interval: %s
  step_down_grace: %s
  startup_allowance: %s
  broker_health_step_down: %s
brokers: {local: {url: "tcp://127.0.0.1:1883", connect_timeout: %s, reconcile_timeout: %s, unmatched_grace: %s}}
devices: {d: {kind: modbus_tcp, address: "127.0.0.1:502", connect_timeout: %s, request_timeout: %s}}
routes: [{name: pub, session: s, kind: poll, device: d, broker: local}]
`, spread, l, r, j, c, p, g, s, b, ct, rt, ug, dc, dr)
		file := writeConfig(t, y)
		_, out, errs := runCmd(t, "admit", "-c", file, "--json")
		a := decodeAdmission(t, out)
		if len(a.Sessions) != 1 {
			t.Fatalf("trial %d: %s %s", trial, out, errs)
		}
		got := a.Sessions[0]
		ref := admissiontest.Timing{L: int64(l), R: int64(r), J: int64(j), C: int64(c), P: int64(p), G: int64(g), S: int64(s), B: int64(b),
			// The device session also claims its endpoint: one C.
			A: int64(3*ct + 3*rt + 2*ug + dc + dr + c)}
		if got.ActivationNS != ref.A {
			t.Fatalf("trial %d: activation %d, want %d", trial, got.ActivationNS, ref.A)
		}
		if got.OwnerDeathNS == nil {
			// Only the safety rules may keep a budget from being computed.
			if len(got.Refusals) == 0 {
				t.Fatalf("trial %d: no budget and no refusal", trial)
			}
			continue
		}
		want, deferral := admissiontest.OwnerDeath(ref).Int64(), int64(0)
		if spread {
			want, deferral = admissiontest.OwnerDeathSpread(ref).Int64(), admissiontest.TakeoverDeferral(ref).Int64()
		}
		if *got.OwnerDeathNS != want {
			t.Fatalf("trial %d: owner_death_ns %d, formula %d\n%s", trial, *got.OwnerDeathNS, want, y)
		}
		if d, ok := got.Terms["owner_death"]["takeover_deferral"]; d != deferral || ok != spread {
			t.Fatalf("trial %d (spread %t): takeover_deferral term %d (present %t), formula %d", trial, spread, d, ok, deferral)
		}
		if _, text, _ := runCmd(t, "admit", "-c", file); spread != strings.Contains(text, "takeover_deferral") {
			t.Fatalf("trial %d (spread %t): admit text:\n%s", trial, spread, text)
		}
		if want := admissiontest.BrokerPath(ref).Int64(); got.BrokerPathNS == nil || *got.BrokerPathNS != want {
			t.Fatalf("trial %d: broker_path_ns %v, formula %d\n%s", trial, got.BrokerPathNS, want, y)
		}
		var sum int64
		for _, v := range got.Terms["owner_death"] {
			sum += v
		}
		if sum != *got.OwnerDeathNS {
			t.Fatalf("trial %d: owner-death terms add to %d, total %d", trial, sum, *got.OwnerDeathNS)
		}
	}
}

func TestBudgetPrintsTheSeedFigures(t *testing.T) {
	for profile, want := range map[string][]string{
		"standalone": {"owner-death budget: 1097.5s", "broker-path budget: broker_health_step_down + 382.5s", "renew_interval         75.555555555s  (derived)"},
		"clustered":  {"owner-death budget: 336.5s", "broker-path budget: broker_health_step_down + 290s", "activation 240s"},
	} {
		code, out, errs := runCmd(t, "budget", "--profile", profile)
		for _, w := range want {
			if code != exitOK || !strings.Contains(out, w) {
				t.Errorf("budget --profile %s: exit %d, output lacks %q:\n%s%s", profile, code, w, out, errs)
			}
		}
	}
	code, out, _ := runCmd(t, "budget", "--profile", "all", "--json")
	var ps []report.Profile
	if err := json.Unmarshal([]byte(out), &ps); err != nil || code != exitOK || len(ps) != 2 {
		t.Fatalf("budget --json: exit %d %v\n%s", code, err, out)
	}
	if ps[0].OwnerDeath.Total != 1097500*time.Millisecond || ps[1].BrokerPathBase != 290*time.Second {
		t.Errorf("budget --json: %+v", ps)
	}
	if code, _, _ := runCmd(t, "budget", "--profile", "edge"); code != exitInvalid {
		t.Errorf("unknown profile: exit %d", code)
	}
}

// The page's profile table is exactly what the binary prints.
func TestDocsTableMatchesBinary(t *testing.T) {
	code, table, _ := runCmd(t, "budget", "--markdown")
	if code != exitOK {
		t.Fatal(code)
	}
	for _, want := range []string{"75.56s derived", "1097.5s", "broker_health_step_down + 382.5s", "336.5s", "broker_health_step_down + 290s"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	page, err := os.ReadFile("../../docs/failover-budget.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), table) {
		t.Errorf("docs/failover-budget.md does not contain the table `leasebridge budget --markdown` prints; run go generate ./...:\n%s", table)
	}
}

// The configuration embedded in each Kubernetes example is admitted too.
func TestKubernetesExampleConfigIsAdmitted(t *testing.T) {
	for _, name := range []string{"shared-broker.yaml", "clustered-broker.yaml", "lease-store.yaml"} {
		raw, err := os.ReadFile("../../examples/kubernetes/" + name)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		found := false
		for {
			var doc struct {
				Kind string            `yaml:"kind"`
				Data map[string]string `yaml:"data"`
			}
			if err := dec.Decode(&doc); err != nil {
				break
			}
			cfg, ok := doc.Data["config.yaml"]
			if doc.Kind != "ConfigMap" || !ok {
				continue
			}
			found = true
			code, out, errs := runCmd(t, "admit", "-c", writeConfig(t, cfg))
			if code != exitOK {
				t.Errorf("%s config: exit %d\n%s%s", name, code, out, errs)
			}
			if name == "lease-store.yaml" && !strings.Contains(out, "lease store kubernetes Leases in namespace plant-a") {
				t.Errorf("%s: admit does not name the Kubernetes lease store:\n%s", name, out)
			}
		}
		if !found {
			t.Errorf("no leasebridge ConfigMap in examples/kubernetes/%s", name)
		}
	}
}

// Settings only a transport checks (here OPC UA users without a password)
// are refused by admit and by run before anything
// is opened, each with its file, line and key path; a CA file the
// deployment provides may be missing for admit, a dry run in CI, but not
// for run.
func TestTransportSettingsRefusedBeforeRun(t *testing.T) {
	cfg := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:1"]}
manager: {broker_health_step_down: "off"}
brokers:
  local: {url: "tcp://127.0.0.1:1883"}
  cloud: {url: "ssl://127.0.0.1:8883", tls: {ca_file: /nonexistent/leasebridge-ca.pem}}
devices:
  packer:
    kind: opcua
    address: opc.tcp://127.0.0.1:4840
    username: bob
    groups: [{name: g, interval: 1s, tags: [{name: speed, address: "ns=1;s=speed", type: float64}]}]
  filler:
    kind: opcua
    address: opc.tcp://127.0.0.1:4841
    username: carol
    groups: [{name: g, interval: 1s, tags: [{name: level, address: "ns=1;s=level", type: float64}]}]
routes:
  - {name: a, session: a, kind: poll, device: packer, broker: local}
  - {name: b, session: b, kind: poll, device: filler, broker: local}
  - {name: up, session: up, kind: bridge, broker: local, remote: cloud, topics: [{from: "x/#"}]}
`)
	wantDevices := []string{
		`cfg.yaml:8:3: devices.packer: `, `username "bob" needs password_file or password_env`,
		`cfg.yaml:13:3: devices.filler: `, `username "carol" needs password_file or password_env`,
	}
	code, _, errs := runCmd(t, "admit", "-c", cfg)
	for _, w := range wantDevices {
		if !strings.Contains(errs, w) {
			t.Errorf("admit: no %q in\n%s", w, errs)
		}
	}
	if code != exitInvalid || strings.Contains(errs, "leasebridge-ca.pem") {
		t.Errorf("admit: exit %d (want %d, and no complaint about the CA file)\n%s", code, exitInvalid, errs)
	}
	code, out, _ := runCmd(t, "admit", "-c", cfg, "--json")
	a := decodeAdmission(t, out)
	if code != exitInvalid || len(a.Errors) != 2 || a.Errors[0].Line != 8 || a.Errors[0].Path != "devices.packer" ||
		a.Errors[1].Line != 13 || a.Errors[1].Path != "devices.filler" {
		t.Errorf("admit --json: exit %d %+v", code, a.Errors)
	}
	// run refuses before it opens the (unreachable) lease store: exit 2,
	// not the runtime failure's 1, and it needs the CA file too.
	code, _, errs = runCmd(t, "run", "-c", cfg)
	for _, w := range append(wantDevices, `cfg.yaml:6:3: brokers.cloud: `, "leasebridge-ca.pem") {
		if !strings.Contains(errs, w) {
			t.Errorf("run: no %q in\n%s", w, errs)
		}
	}
	if code != exitInvalid {
		t.Errorf("run: exit %d, want %d", code, exitInvalid)
	}
}

// A device of two sessions and two entries of one endpoint are refused
// (exit 1) naming both, in text and in JSON, with the budgets computed.
func TestAdmitRefusesSharedDevicesAndEndpoints(t *testing.T) {
	const head = `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {failover_slo: 10m, broker_health_step_down: 60s}
brokers: {local: {url: "tcp://127.0.0.1:1883"}}
devices:
`
	dev := func(name, body string) string {
		return "  " + name + ": {" + body + ", groups: [{name: g, tags: [{name: t, address: \"1\", register: holding, type: int16}]}]}\n"
	}
	for _, c := range []struct {
		name, devices, routes string
		want                  []string
	}{
		{
			name:    "one device, two sessions",
			devices: dev("press", `kind: modbus_tcp, address: "10.0.0.5:502"`),
			routes:  "  - {name: ra, session: a, kind: poll, device: press, broker: local}\n  - {name: rb, session: b, kind: poll, device: press, broker: local}\n",
			want:    []string{`device "press" (cfg.yaml:6) is used by session "a" (route "ra", cfg.yaml:8) and session "b" (route "rb", cfg.yaml:9)`, "put both routes in one session"},
		},
		{
			name:    "modbus_tcp, default port",
			devices: dev("a", `kind: modbus_tcp, address: "PLC.local:502"`) + dev("b", `kind: modbus_tcp, address: "plc.local"`),
			want:    []string{`devices "a" (cfg.yaml:6, session a) and "b" (cfg.yaml:7, session b) are both endpoint modbus_tcp://plc.local:502`},
		},
		{
			name:    "modbus_rtu, two units on one line",
			devices: dev("a", `kind: modbus_rtu, address: /dev/ttyS0, unit_id: 1`) + dev("b", `kind: modbus_rtu, address: /dev/ttyS0, unit_id: 2`),
			want:    []string{`devices "a" (cfg.yaml:6, session a) and "b" (cfg.yaml:7, session b) are both endpoint modbus_rtu:/dev/ttyS0`},
		},
		{
			name:    "s7, one cpu",
			devices: strings.ReplaceAll(dev("a", `kind: s7, address: "10.0.0.6", slot: 1`)+dev("b", `kind: s7, address: "10.0.0.6:102", slot: 1`), `address: "1", register: holding`, `address: DB1.DBW0`),
			want:    []string{`devices "a" (cfg.yaml:6, session a) and "b" (cfg.yaml:7, session b) are both endpoint s7://10.0.0.6:102 rack 0 slot 1`},
		},
		{
			name:    "opcua, user info",
			devices: strings.ReplaceAll(dev("a", `kind: opcua, address: "opc.tcp://op:pw@Line3/ua"`)+dev("b", `kind: opcua, address: "opc.tcp://line3:4840/ua"`), `address: "1", register: holding`, `address: "ns=1;s=t"`),
			want:    []string{`devices "a" (cfg.yaml:6, session a) and "b" (cfg.yaml:7, session b) are both endpoint opc.tcp://line3:4840/ua`},
		},
	} {
		routes := c.routes
		if routes == "" {
			routes = "  - {name: ra, session: a, kind: poll, device: a, broker: local}\n  - {name: rb, session: b, kind: poll, device: b, broker: local}\n"
		}
		cfg := writeConfig(t, head+c.devices+"routes:\n"+routes)
		for i := range c.want {
			c.want[i] = strings.ReplaceAll(c.want[i], "cfg.yaml", cfg)
		}
		code, out, errs := runCmd(t, "admit", "-c", cfg)
		if code != exitRefused || strings.Count(out, "REFUSED") != 2 || strings.Contains(out, ":pw@") {
			t.Errorf("%s: exit %d\n%s%s", c.name, code, out, errs)
		}
		for _, w := range c.want {
			if strings.Count(out, w) != 2 {
				t.Errorf("%s: output lacks %q under both sessions:\n%s", c.name, w, out)
			}
		}
		code, out, _ = runCmd(t, "admit", "-c", cfg, "--json")
		a := decodeAdmission(t, out)
		if code != exitRefused || a.Admitted || len(a.Sessions) != 2 {
			t.Fatalf("%s --json: exit %d %+v", c.name, code, a)
		}
		for _, s := range a.Sessions {
			if s.Admitted || len(s.Refusals) != 1 || !strings.Contains(s.Refusals[0], c.want[0]) || s.OwnerDeathNS == nil {
				t.Errorf("%s --json: session %s: %+v", c.name, s.Session, s)
			}
		}
	}
}

// storeConfig is a clustered file at the lab's lease timing; members are
// written only when withMembers.
func storeConfig(withMembers bool, heartbeat, election string) string {
	y := `deployment_mode: clustered
lease_store:
  heartbeat_interval: ` + heartbeat + `
  election_timeout: ` + election + `
`
	if !withMembers {
		// A file names the members or the endpoints, never both.
		y += `  endpoints: ["http://127.0.0.1:2379"]
`
	} else {
		y += `  plaintext: true
  members:
    - {name: a, peer_url: "http://127.0.0.1:2380", client_url: "http://127.0.0.1:2379"}
    - {name: b, peer_url: "http://127.0.0.1:2382", client_url: "http://127.0.0.1:2381"}
    - {name: c, peer_url: "http://127.0.0.1:2384", client_url: "http://127.0.0.1:2383"}
`
	}
	const timeouts = "connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms"
	return y + `manager:
  lease_ttl: 2s
  renew_interval: 300ms
  lease_renew_jitter: 100ms
  renew_call_timeout: 200ms
  acquire_poll_interval: 200ms
  step_down_grace: 300ms
  broker_health_step_down: 1s
brokers:
  local: {url: "tcp://127.0.0.1:1883", ` + timeouts + `}
  far: {url: "tcp://127.0.0.1:1884", ` + timeouts + `}
routes:
  - {name: up, session: up, kind: bridge, broker: local, remote: far, topics: [{from: "a/#"}]}
`
}

// With lease_store.members admit prints the store_recovery term, the
// election bound and the election-fence warning in text, JSON and GitHub
// annotations; without them there is no term, no bound and no warning.
func TestAdmitStoreRecovery(t *testing.T) {
	for _, tc := range []struct {
		members             bool
		heartbeat, election string
		term                int64 // -1: absent
		warn                bool
	}{
		// E = 4s + 0.3s + 0.5s = 4.8s: 4.8s + 0.6s - 3s observation calls.
		{true, "100ms", "1s", int64(2400 * time.Millisecond), true},
		// E = 0.4s + 0.03s + 0.5s = 0.93s: the observation calls cover
		// it, but not the 2s lease of an owner whose renews fail.
		{true, "10ms", "100ms", 0, true},
		{false, "100ms", "1s", -1, false},
	} {
		f := writeConfig(t, storeConfig(tc.members, tc.heartbeat, tc.election))
		code, out, errs := runCmd(t, "admit", "-c", f, "--json")
		if code != exitOK {
			t.Fatalf("%+v: exit %d\n%s%s", tc, code, out, errs)
		}
		s := decodeAdmission(t, out).Sessions[0]
		got, ok := s.Terms["owner_death"]["store_recovery"]
		if (tc.term < 0) == ok || (ok && got != tc.term) {
			t.Errorf("%+v: store_recovery %d (present %v)", tc, got, ok)
		}
		if (s.StoreElectionNS != nil) != tc.members || (len(s.Warnings) > 0) != tc.warn || s.Warnings == nil {
			t.Errorf("%+v: store_election_ns %v, warnings %q", tc, s.StoreElectionNS, s.Warnings)
		}
		_, text, _ := runCmd(t, "admit", "-c", f)
		if strings.Contains(text, "store_recovery") != tc.members || strings.Contains(text, "warning: store election") != tc.warn {
			t.Errorf("%+v: text\n%s", tc, text)
		}
		_, gh, _ := runCmd(t, "admit", "-c", f, "--format", "github")
		if strings.Contains(gh, "::warning ") != tc.warn {
			t.Errorf("%+v: github\n%s", tc, gh)
		}
	}
}
