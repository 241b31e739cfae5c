package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/routes/suggest"
)

// TestAdmitSuggestionsAdmitWhenApplied takes the refused configuration
// of issue 24 at two objectives, applies every change admit suggests to
// the file's text as an operator would (at the printed line), and runs
// the built binary's admit on the result, which must exit 0. At 60 s no
// single key fits (the clustered profile without any activation is
// 96.5 s), so admit says so and offers keys together and the objective;
// at 300 s single keys fit.
func TestAdmitSuggestionsAdmitWhenApplied(t *testing.T) {
	bin := testbin.Leasebridge(t)
	orig, err := os.ReadFile("testdata/refused-60s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, slo := range []string{"60s", "300s"} {
		t.Run(slo, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "config.yaml")
			text := strings.Replace(string(orig), "failover_slo: 60s", "failover_slo: "+slo, 1)
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			doc, out := admitJSON(t, bin, file, 1)
			sugg := doc.Sessions[0].Suggestions
			textOut := admitText(t, bin, file)
			kinds := map[string]int{}
			for _, s := range sugg {
				kinds[s.Kind]++
				for _, c := range s.Changes {
					if !strings.Contains(textOut, c.String()) {
						t.Errorf("text output lacks %q:\n%s", c, textOut)
					}
				}
				applied := []byte(text)
				// From the bottom up, so that an added line does not move
				// the lines of the changes still to apply.
				changes := slices.SortedFunc(slices.Values(s.Changes), func(a, b suggest.Change) int { return b.Line - a.Line })
				for _, c := range changes {
					applied = applyByHand(t, applied, c)
				}
				if err := os.WriteFile(file, applied, 0o600); err != nil {
					t.Fatal(err)
				}
				if _, out := admitJSON(t, bin, file, 0); t.Failed() {
					t.Fatalf("after %+v:\n%s\n%s", s.Changes, applied, out)
				}
			}
			for _, want := range []string{
				"brokers.local: 3 x connect_timeout 30s + 3 x reconcile_timeout 30s + 2 x unmatched_grace 30s = 240s",
				"devices.plc: 1 x connect_timeout 5s + 1 x request_timeout 2s = 7s",
				"lease:endpoint_claim: 1 x renew_call_timeout 3s = 3s",
			} {
				if !strings.Contains(textOut, want) {
					t.Errorf("text lacks the breakdown %q:\n%s", want, textOut)
				}
			}
			// docs/failover-budget.md quotes these lines of the output.
			page, err := os.ReadFile("../../docs/failover-budget.md")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range []string{"lease:endpoint_claim: 1 x renew_call_timeout 3s = 3s", "brokers.local: 3 x connect_timeout 30s + 3 x reconcile_timeout 30s + 2 x unmatched_grace 30s = 240s"} {
				if !strings.Contains(strings.Join(strings.Fields(string(page)), " "), line) {
					t.Errorf("docs/failover-budget.md does not quote the output's %q", line)
				}
			}
			activation := 0
			for _, term := range doc.Sessions[0].Breakdown["owner_death"] {
				if term.Name == "activation" {
					for _, p := range term.Parts {
						activation += int(p.Count) * int(p.Each)
					}
				}
			}
			if activation != 250e9 {
				t.Errorf("JSON activation parts add up to %d ns, want 250 s", activation)
			}
			switch slo {
			case "60s":
				if kinds[suggest.KindKey] != 0 || kinds[suggest.KindKeys] != 1 || kinds[suggest.KindObjective] != 1 {
					t.Errorf("at 60s want no single key, one combined change and the objective, got %v:\n%s", kinds, out)
				}
				if !strings.Contains(textOut, "no single key fits failover_slo 60s") {
					t.Errorf("text does not say no single key fits:\n%s", textOut)
				}
			case "300s":
				if kinds[suggest.KindKey] < 2 || kinds[suggest.KindKeys] != 0 {
					t.Errorf("at 300s want single keys, got %v:\n%s", kinds, out)
				}
			}
		})
	}
}

// admitJSON runs admit --json and checks its exit status.
func admitJSON(t *testing.T, bin, file string, want int) (report.Admission, string) {
	t.Helper()
	out, err := exec.Command(bin, "admit", "--json", "-c", file).Output()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Errorf("admit exit %d, want %d", code, want)
	}
	var doc report.Admission
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return doc, string(out)
}

func admitText(t *testing.T, bin, file string) string {
	t.Helper()
	out, _ := exec.Command(bin, "admit", "-c", file).Output()
	return string(out)
}

// applyByHand edits the text at the change's line: the key's value
// replaced, or the key added as the first entry of the block on that
// line, indented as the block's next line is.
func applyByHand(t *testing.T, text []byte, c suggest.Change) []byte {
	t.Helper()
	lines := strings.Split(string(text), "\n")
	key := c.Path[strings.LastIndex(c.Path, ".")+1:]
	i := c.Line - 1
	if i < 0 || i >= len(lines) {
		t.Fatalf("%s: line %d outside the file", c, c.Line)
	}
	if !c.Add {
		k := strings.Index(lines[i], key+":")
		if k < 0 {
			t.Fatalf("%s: line %d is %q", c, c.Line, lines[i])
		}
		lines[i] = lines[i][:k] + key + ": " + c.To
		return []byte(strings.Join(lines, "\n"))
	}
	block := c.Under[strings.LastIndex(c.Under, ".")+1:]
	if !strings.HasPrefix(strings.TrimSpace(lines[i]), block+":") {
		t.Fatalf("%s: line %d is %q, not the block %s", c, c.Line, lines[i], block)
	}
	next := lines[i+1]
	indent := next[:len(next)-len(strings.TrimLeft(next, " "))]
	added := fmt.Sprintf("%s%s: %s", indent, key, c.To)
	lines = append(lines[:i+1], append([]string{added}, lines[i+1:]...)...)
	return []byte(strings.Join(lines, "\n"))
}

// TestAdmitJSONCarriesPasswordNotes: the text and github formats print
// the passwords the deployment provides that are missing here; JSON
// once left them out.
func TestAdmitJSONCarriesPasswordNotes(t *testing.T) {
	t.Setenv("LEASEBRIDGE_ETCD_PASSWORD", "")
	os.Unsetenv("LEASEBRIDGE_ETCD_PASSWORD")
	var out, errb strings.Builder
	if code := admit([]string{"--json", "-c", "../../examples/clustered-sidecar.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc report.Admission
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range doc.DeploymentInputs {
		paths = append(paths, e.Path)
		if e.Line == 0 {
			t.Errorf("note %s has no line", e.Path)
		}
	}
	want := []string{"lease_store.password_env", "brokers.cloud.password_file"}
	if !slices.Equal(paths, want) {
		t.Errorf("deployment_inputs %v, want %v", paths, want)
	}
}

// TestWriteRouteWithoutWritableTagWarns: a write route on a device with
// no writable tag was admitted without a word, though every request to
// it would be refused. It stays admitted, with a warning at the route's
// device key in every format; the examples, whose write routes have
// writable tags, get none.
func TestWriteRouteWithoutWritableTagWarns(t *testing.T) {
	orig, err := os.ReadFile("testdata/refused-60s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(orig), "failover_slo: 60s", "failover_slo: 600s", 1) + `  - name: plc-commands
    session: plc
    kind: write
    device: plc
    broker: local
    request_topic: plant/plc/write/req
    reply_topic: plant/plc/write/resp
`
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		var out, errb strings.Builder
		if code := admit(append(args, "-c", file), &out, &errb); code != 0 {
			t.Fatalf("admit %v: exit %d: %s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	line := strings.Count(text[:strings.Index(text, "- name: plc-commands")], "\n") + 4 // the device key
	if out := run(); !strings.Contains(out, fmt.Sprintf("warning: %s:%d:", file, line)) || !strings.Contains(out, `device "plc" has no tag with writable: true`) {
		t.Errorf("text has no warning at line %d:\n%s", line, out)
	}
	if out := run("--format", "github"); !strings.Contains(out, fmt.Sprintf("::warning file=%s,line=%d", file, line)) {
		t.Errorf("github has no warning:\n%s", out)
	}
	var doc report.Admission
	if err := json.Unmarshal([]byte(run("--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Warnings) != 1 || doc.Warnings[0].Path != "routes[1].device" || doc.Warnings[0].Line != line {
		t.Errorf("JSON warnings %+v", doc.Warnings)
	}
	for _, ex := range []string{"clustered-sidecar.yaml", "standalone-gateway.yaml", "edge-fleet.yaml"} {
		var out, errb strings.Builder
		admit([]string{"--json", "-c", "../../examples/" + ex}, &out, &errb)
		var exDoc report.Admission
		if err := json.Unmarshal([]byte(out.String()), &exDoc); err != nil || len(exDoc.Warnings) != 0 {
			t.Errorf("%s: warnings %+v (%v)", ex, exDoc.Warnings, err)
		}
	}
}
