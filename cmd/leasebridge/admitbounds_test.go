package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/routes"
)

// manyUnknownKeys writes examples/clustered-sidecar.yaml followed by n
// unknown top-level keys and returns its path and contents.
func manyUnknownKeys(t testing.TB, n int) (string, []byte) {
	t.Helper()
	base, err := os.ReadFile("../../examples/clustered-sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	sb.Write(base)
	for i := range n {
		fmt.Fprintf(&sb, "unknown_key_%d: 1\n", i)
	}
	path := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, []byte(sb.String())
}

// yamlParse is the least any admit of data costs: parsing the YAML.
func yamlParse(t testing.TB, data []byte) time.Duration {
	t.Helper()
	start := time.Now()
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// A generated file with 500,000 unknown keys: admit lists the first
// routes.MaxProblems problems and says how many more there are, in every
// format, and answers in a small multiple of the time the YAML parse alone
// takes in the same run (once it printed 41 MB, a did-you-mean each, in
// more than 5 s). Each side is timed several times, alternating, and the
// fastest of each compared, so load on the machine hits both.
func TestAdmitManyProblemsListsTheFirst(t *testing.T) {
	const n = 500_000
	path, data := manyUnknownKeys(t, n)
	more := routes.MoreProblems(n - routes.MaxProblems)
	for _, format := range []string{"text", "json", "github"} {
		code, out, errs := runCmd(t, "admit", "-c", path, "--format", format)
		all := out + errs
		if code != exitInvalid {
			t.Errorf("%s: exit %d, want %d", format, code, exitInvalid)
		}
		want := more
		if format == "json" {
			want = fmt.Sprintf(`"errors_not_listed": %d`, n-routes.MaxProblems)
		}
		if !strings.Contains(all, want) || strings.Count(all, "unknown_key_") != 2*routes.MaxProblems {
			t.Errorf("%s: lacks %q or lists %d keys, want %d:\n%.2000s", format, want, strings.Count(all, "unknown_key_")/2, routes.MaxProblems, all)
		}
		if len(all) > routes.MaxProblems*250 {
			t.Errorf("%s: %d bytes of output for %d listed problems", format, len(all), routes.MaxProblems)
		}
	}
	const rounds, factor = 2, 4
	parse, admit := time.Duration(1<<62), time.Duration(1<<62)
	for range rounds {
		parse = min(parse, yamlParse(t, data))
		start := time.Now()
		runCmd(t, "admit", "-c", path)
		admit = min(admit, time.Since(start))
	}
	t.Logf("%d unknown keys: admit %v, YAML parse alone %v (fastest of %d)", n, admit, parse, rounds)
	if admit > factor*parse {
		t.Errorf("admit took %v, over %d times the YAML parse alone (%v)", admit, factor, parse)
	}
}

// One problem never prints more than a few kilobytes: a 10 MB scalar is
// quoted by its first bytes and its length, whatever the format.
func TestAdmitHugeScalarPrintsLittle(t *testing.T) {
	base, err := os.ReadFile("../../examples/clustered-sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("x", 10<<20)
	for name, y := range map[string]string{
		"deployment_mode": strings.Replace(string(base), "deployment_mode: clustered", "deployment_mode: "+huge, 1),
		// YAML refuses a plain key over 1024 characters at its line.
		"key":      string(base) + huge + ": 1\n",
		"duration": strings.Replace(string(base), "  startup_allowance: 0s", "  startup_allowance: "+huge, 1),
	} {
		if y == string(base) {
			t.Fatalf("%s: the example changed; this test no longer writes its huge value", name)
		}
		path := writeConfig(t, y)
		for _, format := range []string{"text", "json", "github"} {
			code, out, errs := runCmd(t, "admit", "-c", path, "--format", format)
			quoted := name == "key" || strings.Contains(out+errs, fmt.Sprintf("(%d bytes)", len(huge)))
			if code != exitInvalid || !quoted {
				t.Errorf("%s %s: exit %d, the value not quoted by its length:\n%.1000s", name, format, code, out+errs)
			}
			if n := len(out + errs); n > 4096 {
				t.Errorf("%s %s: %d bytes printed for one problem", name, format, n)
			}
		}
	}
}
