// Package archtest keeps the import arrows of DESIGN.md pointing one way:
// cmd -> failover -> {lease, transports, routes}; routes -> admission
// (and internal/redact, a standard-library-only leaf);
// admission imports only the standard library; lease never imports
// transports and no transport imports lease; lease/etcd* is the only
// importer of the etcd client.
package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/leasebridge/leasebridge"

// packages maps each non-test package of the module to its direct imports.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, mod+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkgs[strings.TrimPrefix(f[0], mod+"/")] = f[1:]
	}
	return pkgs
}

func under(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }

func stdlib(imp string) bool { return !strings.Contains(strings.Split(imp, "/")[0], ".") }

// rule says whether package pkg may import imp; a non-empty result is the
// violated rule.
func rule(pkg, imp string) string {
	local := strings.TrimPrefix(imp, mod+"/")
	isLocal := local != imp
	// Test peers may use anything; production code may not use them.
	if under(pkg, "internal/testetcd") || under(pkg, "internal/testmqtt") || under(pkg, "internal/archtest") {
		return ""
	}
	switch {
	case isLocal && under(local, "cmd"):
		return "nothing imports cmd"
	case isLocal && strings.HasPrefix(local, "internal/test") && !strings.HasSuffix(pkg, "test"):
		return "production code never imports test peers"
	case under(pkg, "admission") && pkg != "admission/admissiontest" && !stdlib(imp) && !under(local, "admission"):
		return "admission imports only the standard library"
	case under(pkg, "routes") && isLocal && !under(local, "admission") && local != "internal/redact":
		return "routes imports only admission (and internal/redact)"
	case pkg == "internal/redact" && !stdlib(imp):
		return "internal/redact imports only the standard library"
	case under(pkg, "lease") && isLocal && (under(local, "transports") || under(local, "failover") || under(local, "routes")):
		return "lease never imports transports, routes or failover"
	case under(pkg, "transports") && isLocal && (under(local, "lease") || under(local, "failover")):
		return "no transport imports lease or failover"
	case strings.HasPrefix(imp, "go.etcd.io/etcd/client") && !strings.HasPrefix(pkg, "lease/etcd"):
		return "only lease/etcd* imports the etcd client"
	case under(pkg, "failover") && isLocal && under(local, "cmd"):
		return "failover never imports cmd"
	}
	return ""
}

func TestImportArrows(t *testing.T) {
	pkgs := packages(t)
	if _, ok := pkgs["admission"]; !ok {
		t.Fatalf("go list found no admission package: %v", pkgs)
	}
	for pkg, imps := range pkgs {
		for _, imp := range imps {
			if why := rule(pkg, imp); why != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, why)
			}
		}
	}
}

// The rules themselves catch a wrong arrow.
func TestRulesCatchWrongArrows(t *testing.T) {
	for _, c := range [][2]string{
		{"admission", "gopkg.in/yaml.v3"},
		{"routes", mod + "/transports"},
		{"lease", mod + "/transports/mqtt"},
		{"transports/mqtt", mod + "/lease"},
		{"failover", "go.etcd.io/etcd/client/v3"},
		{"failover", mod + "/cmd/leasebridge"},
		{"transports/modbus", mod + "/internal/testmqtt"},
	} {
		if rule(c[0], c[1]) == "" {
			t.Errorf("%s -> %s was allowed", c[0], c[1])
		}
	}
	for _, c := range [][2]string{
		{"lease/etcdstore", "go.etcd.io/etcd/client/v3"},
		{"routes", mod + "/admission"},
		{"failover", mod + "/lease"},
		{"transports/mqtt", mod + "/routes"},
	} {
		if why := rule(c[0], c[1]); why != "" {
			t.Errorf("%s -> %s refused: %s", c[0], c[1], why)
		}
	}
}
