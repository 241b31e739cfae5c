//go:build !leasemutants

package leasesim

import (
	"os/exec"
	"strings"
	"testing"
)

// mutantTests are the tests of mutants_test.go (built only with -tags
// leasemutants); TestMutantsCaught requires each of them to pass.
var mutantTests = []string{"TestMutantNeverFences", "TestMutantSubtle", "TestMutantBulkReads", "TestMutantSpread", "TestMutantBatched"}

// TestMutantsCaught runs the mutant tests, which need a build with -tags
// leasemutants, in a `go test` of this package with that tag, so that a
// plain `go test ./...` (scripts/test) still proves every broken fence
// mode is caught while no release carries one. It runs them here rather
// than as a second line of scripts/test so that no way of running the
// suite can skip them. Each listed test must report PASS.
func TestMutantsCaught(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH (%v): the mutant tests need `go test -tags leasemutants`", err)
	}
	args := []string{"test", "-tags", "leasemutants", "-count=1", "-v", "-timeout", "20m", "-run", "^(" + strings.Join(mutantTests, "|") + ")$"}
	if testing.Short() {
		args = append(args, "-short")
	}
	out, err := exec.CommandContext(t.Context(), goTool, append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, name := range mutantTests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass with -tags leasemutants:\n%s", name, out)
		}
	}
	var caught []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "caught: ") {
			caught = append(caught, strings.TrimSpace(line))
		}
	}
	t.Logf("with -tags leasemutants:\n%s", strings.Join(caught, "\n"))
}
