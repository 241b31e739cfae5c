package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// `help` lists every command; `help CMD` and `CMD -h` print the same
// per-command help with its flags and examples, on stdout, exit 0.
func TestHelp(t *testing.T) {
	code, list, _ := runCmd(t, "help")
	if code != exitOK {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range commands() {
		if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(list) {
			t.Errorf("help does not list %s:\n%s", c.name, list)
		}
		code, viaHelp, errs := runCmd(t, "help", c.name)
		code2, viaFlag, _ := runCmd(t, c.name, "-h")
		if code != exitOK || code2 != exitOK || viaHelp != viaFlag || errs != "" {
			t.Errorf("help %s (exit %d) and %s -h (exit %d) differ or fail:\n%s\n---\n%s%s", c.name, code, c.name, code2, viaHelp, viaFlag, errs)
		}
		if strings.Contains(viaHelp, "%!") {
			t.Errorf("help %s has a formatting error:\n%s", c.name, viaHelp)
		}
		for _, want := range []string{"usage: leasebridge " + c.name, "\nflags:\n", "\nexamples:\n  # "} {
			if !strings.Contains(viaHelp, want) {
				t.Errorf("help %s lacks %q:\n%s", c.name, want, viaHelp)
			}
		}
		if !regexp.MustCompile(`\n  [^#\n]*leasebridge ` + c.name + `\b`).MatchString(viaHelp) {
			t.Errorf("help %s shows no example command:\n%s", c.name, viaHelp)
		}
	}
	if code, _, errs := runCmd(t, "help", "nope"); code != exitInvalid || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d %s", code, errs)
	}
	if code, _, errs := runCmd(t, "nope"); code != exitInvalid || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("nope: exit %d %s", code, errs)
	}
}

// Unknown, conflicting and invalid flags exit 2 with one line naming the
// problem and a pointer to the command's help.
func TestUsageErrors(t *testing.T) {
	cfg := "../../examples/clustered-sidecar.yaml"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"admit", "-c", cfg, "--bogus"}, "leasebridge admit: unknown flag -bogus"},
		{[]string{"admit", "-c", cfg, "stray"}, `leasebridge admit: unexpected argument "stray"`},
		{[]string{"admit"}, "leasebridge admit: -c FILE is required"},
		{[]string{"admit", "-c", cfg, "--json", "--format", "github"}, "--json and --format github conflict"},
		{[]string{"admit", "-c", cfg, "--format", "yaml"}, `--format "yaml": want text, json or github`},
		{[]string{"budget", "--json", "--markdown"}, "--json and --markdown conflict"},
		{[]string{"budget", "--profile", "all", "--json", "--markdown"}, "--json and --markdown conflict"},
		{[]string{"budget", "--profile", "edge"}, `unknown profile "edge"`},
		{[]string{"budget"}, "--profile is required"},
		{[]string{"run", "-c", cfg, "--log-format", "xml"}, `--log-format "xml": want json or text`},
		{[]string{"run", "-c", cfg, "--log-level", "trace"}, `--log-level "trace": want debug, info, warn or error`},
		{[]string{"run"}, "leasebridge run: -c FILE is required"},
	} {
		code, out, errs := runCmd(t, c.args...)
		name := c.args[0]
		if code != exitInvalid || out != "" || !strings.HasPrefix(errs, "leasebridge "+name+": ") || !strings.Contains(errs, c.want) ||
			!strings.Contains(errs, "run 'leasebridge help "+name+"'") {
			t.Errorf("%q: exit %d, want %d and %q on stderr only:\n%s%s", c.args, code, exitInvalid, c.want, out, errs)
		}
	}
	// --json is --format json, so together they agree.
	if code, out, _ := runCmd(t, "admit", "-c", cfg, "--json", "--format", "json"); code != exitOK || decodeAdmission(t, out).File != cfg {
		t.Errorf("--json --format json: exit %d", code)
	}
}

// `budget --profile P --markdown` prints P's row alone.
func TestBudgetMarkdownOneProfile(t *testing.T) {
	code, one, _ := runCmd(t, "budget", "--profile", "standalone", "--markdown")
	_, all, _ := runCmd(t, "budget", "--markdown")
	rows := func(s string) int { return strings.Count(s, "\n| ") }
	if code != exitOK || rows(one) != 1 || !strings.Contains(one, "| standalone (") || strings.Contains(one, "clustered") || rows(all) != 2 {
		t.Errorf("budget --profile standalone --markdown: exit %d\n%s\nall:\n%s", code, one, all)
	}
	if !strings.Contains(all, strings.SplitN(one, "\n", 3)[2]) {
		t.Errorf("the standalone row differs from the full table's:\n%s\n%s", one, all)
	}
}

// A configuration file that cannot be read is one line naming the path
// once, without a package prefix, exit 2.
func TestUnreadableFileIsOneLine(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	for _, c := range []struct {
		path, why string
	}{{missing, "no such file or directory"}, {dir, "is a directory"}} {
		for _, cmd := range []string{"admit", "run"} {
			code, out, errs := runCmd(t, cmd, "-c", c.path)
			want := "leasebridge " + cmd + ": " + c.path + ": cannot read: " + c.why + "\n"
			if code != exitInvalid || out != "" || errs != want {
				t.Errorf("%s -c %s: exit %d\nstdout %q\nstderr %q\nwant   %q", cmd, c.path, code, out, errs, want)
			}
		}
	}
	code, out, _ := runCmd(t, "admit", "-c", missing, "--json")
	a := decodeAdmission(t, out)
	if code != exitInvalid || len(a.Errors) != 1 || a.Errors[0].File != missing || a.Errors[0].Message != "cannot read: no such file or directory" {
		t.Errorf("admit --json: exit %d %+v", code, a.Errors)
	}
	code, out, _ = runCmd(t, "admit", "-c", missing, "--format", "github")
	if want := "::error file=" + missing + ",title=leasebridge admit%3A invalid configuration::cannot read: no such file or directory\n"; code != exitInvalid || out != want {
		t.Errorf("admit --format github: exit %d\n%q\nwant %q", code, out, want)
	}
}

// admit --format github annotates the file: ::error at the line of every
// problem, of every refused session's first route, and ::notice with the
// budget of every admitted session.
func TestAdmitFormatGitHub(t *testing.T) {
	invalid := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
brokers: {local: {url: "tcp://127.0.0.1:1883"}}
routes:
  - {name: bridge, session: up, kind: bridge, broker: local, remote: far, topics: [{from: "a/#"}]}
brokers_typo: 1
`)
	code, out, errs := runCmd(t, "admit", "-c", invalid, "--format", "github")
	if code != exitInvalid || errs != "" ||
		!strings.Contains(out, "::error file="+invalid+",line=6,col=1,title=leasebridge admit%3A invalid configuration::brokers_typo: unknown key \"brokers_typo\"") {
		t.Errorf("invalid: exit %d\n%s%s", code, out, errs)
	}

	mixed := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:2379"]}
manager: {broker_health_step_down: 30s}
brokers: {local: {url: "tcp://127.0.0.1:1883"}}
devices:
  d: {kind: modbus_tcp, address: "127.0.0.1:502"}
  e: {kind: modbus_tcp, address: "127.0.0.2:502"}
routes:
  - {name: fine, session: ok, kind: poll, device: d, broker: local}
  - {name: slow, session: slow, kind: poll, device: e, broker: local,
     manager: {failover_slo: 1s}}
`)
	code, out, _ = runCmd(t, "admit", "-c", mixed, "--format", "github")
	_, js, _ := runCmd(t, "admit", "-c", mixed, "--json")
	a := decodeAdmission(t, js)
	if code != exitRefused || len(a.Sessions) != 2 {
		t.Fatalf("exit %d, sessions %+v\n%s", code, a.Sessions, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var wantLines []string
	for _, s := range a.Sessions {
		line := map[string]string{"ok": "9", "slow": "10"}[s.Session]
		if s.Admitted {
			wantLines = append(wantLines, "::notice file="+mixed+",line="+line+",col=5,title=leasebridge admit%3A session ok admitted::owner-death budget ")
			continue
		}
		for _, why := range s.Refusals {
			wantLines = append(wantLines, "::error file="+mixed+",line="+line+",col=5,title=leasebridge admit%3A session slow refused::"+escapeData(why))
		}
	}
	wantLines = append(wantLines, mixed+": 1 of 2 session(s) admitted")
	if len(lines) != len(wantLines) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(wantLines), out)
	}
	for i, w := range wantLines {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d:\n%s\nwant prefix\n%s", i, lines[i], w)
		}
	}
	if !strings.Contains(out, "; broker-path budget ") {
		t.Errorf("the admitted session's notice lacks its broker-path budget:\n%s", out)
	}
}

func TestWorkflowCommandEscaping(t *testing.T) {
	if got := escapeData("50% done\nnext\r"); got != "50%25 done%0Anext%0D" {
		t.Errorf("escapeData: %q", got)
	}
	if got := escapeProperty("a:b,c%\n"); got != "a%3Ab%2Cc%25%0A" {
		t.Errorf("escapeProperty: %q", got)
	}
}

// The CI example runs admit with --format github.
func TestCIExampleUsesGitHubFormat(t *testing.T) {
	b, err := os.ReadFile("../../examples/ci/admit.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `leasebridge admit -c "$f" --format github`) {
		t.Errorf("examples/ci/admit.yml does not run admit --format github:\n%s", b)
	}
}

// A password_env variable that is not set is the deployment's to provide,
// like a missing password_file: admit accepts both and notes each at its
// key; run refuses each, the lease store's and an OPC UA device's (read
// only at connect time) included.
func TestPasswordEnvAdmitAcceptsRunRequires(t *testing.T) {
	const env = "LEASEBRIDGE_TEST_UNSET_PASSWORD"
	os.Unsetenv(env)
	missingFile := filepath.Join(t.TempDir(), "absent-password")
	cfg := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://127.0.0.1:1"], username: root, password_env: `+env+`}
manager: {broker_health_step_down: "off"}
brokers:
  local: {url: "tcp://127.0.0.1:1883", username: bridge, password_env: `+env+`}
  cloud: {url: "tcp://127.0.0.1:1884", username: bridge, password_file: `+missingFile+`}
devices:
  ua:
    kind: opcua
    address: opc.tcp://127.0.0.1:4840
    username: op
    password_env: `+env+`
    groups: [{name: g, interval: 1s, tags: [{name: t, address: "ns=1;s=t", type: float64}]}]
routes:
  - {name: a, session: a, kind: poll, device: ua, broker: local}
  - {name: up, session: up, kind: bridge, broker: local, remote: cloud, topics: [{from: "x/#"}]}
`)
	keys := []string{
		"cfg.yaml:2:66: lease_store.password_env: password_env " + env + " is not set",
		"cfg.yaml:5:58: brokers.local.password_env: password_env " + env + " is not set",
		"cfg.yaml:6:58: brokers.cloud.password_file: password_file " + missingFile + " cannot be read",
		"cfg.yaml:12:5: devices.ua.password_env: password_env " + env + " is not set",
	}
	code, out, errs := runCmd(t, "admit", "-c", cfg)
	for _, k := range keys {
		if !strings.Contains(out, k) {
			t.Errorf("admit does not note %q:\n%s", k, out)
		}
	}
	if code != exitOK || !strings.Contains(out, "2 of 2 session(s) admitted") {
		t.Errorf("admit: exit %d, want %d\n%s%s", code, exitOK, out, errs)
	}
	code, out, _ = runCmd(t, "admit", "-c", cfg, "--format", "github")
	if code != exitOK || strings.Count(out, "::notice ") != 2+len(keys) || !strings.Contains(out, "::notice file="+cfg+",line=12,col=5,title=") {
		t.Errorf("admit --format github: exit %d\n%s", code, out)
	}

	code, _, errs = runCmd(t, "run", "-c", cfg)
	if code != exitInvalid {
		t.Errorf("run: exit %d, want %d", code, exitInvalid)
	}
	for _, want := range []string{"lease_store.password_env: password_env " + env + " is not set", "devices.ua.password_env: password_env " + env + " is not set",
		"brokers.local: ", env, "brokers.cloud: ", missingFile} {
		if !strings.Contains(errs, want) {
			t.Errorf("run: no %q in\n%s", want, errs)
		}
	}
	t.Setenv(env, "secret")
	if err := os.WriteFile(missingFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCmd(t, "admit", "-c", cfg); code != exitOK || strings.Contains(out, "not checked here") {
		t.Errorf("admit with every password present: exit %d\n%s", code, out)
	}
}
