// Package archtest keeps the import arrows pointing one way:
// cmd -> failover (the control plane) -> dataplane (what runs inside a
// term) -> {transports, routes}; preflight -> dataplane; fleetview ->
// {lease, routes}; routes -> admission (and internal/redact, a
// standard-library-only leaf), and routes' subpackages (routes/suggest)
// -> routes; admission imports only the standard
// library; lease never imports transports and no transport imports lease;
// lease/etcd* is the only importer of the etcd client; HTTP and exit codes
// live at the command layer (cmd/leasebridge/httpapi, exitcode).
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
	if under(pkg, "internal/testetcd") || under(pkg, "internal/testmqtt") || under(pkg, "internal/testkube") ||
		under(pkg, "internal/archtest") {
		return ""
	}
	if why := planeRule(pkg, local, isLocal, imp); why != "" {
		return why
	}
	switch {
	case isLocal && under(local, "cmd") && !cmdImport(pkg, local):
		return "nothing imports cmd (but a command its own packages, and another command or internal/docgen the exit-code table)"
	case isLocal && strings.HasPrefix(local, "internal/test") && !strings.HasSuffix(pkg, "test"):
		return "production code never imports test peers"
	case under(pkg, "admission") && pkg != "admission/admissiontest" && !stdlib(imp) && !under(local, "admission"):
		return "admission imports only the standard library"
	case under(pkg, "routes") && isLocal && !under(local, "admission") && local != "internal/redact" &&
		(pkg == "routes" || local != "routes"):
		return "routes imports only admission (and internal/redact); a subpackage of routes also routes"
	case pkg == "internal/redact" && !stdlib(imp):
		return "internal/redact imports only the standard library"
	case under(pkg, "lease") && isLocal && anyUnder(local, "transports", "failover", "routes", "dataplane", "preflight", "fleetview"):
		return "lease never imports transports, routes, failover, dataplane, preflight or fleetview"
	case under(pkg, "transports") && isLocal && anyUnder(local, "lease", "failover", "dataplane", "preflight", "fleetview"):
		return "no transport imports lease, failover, dataplane, preflight or fleetview"
	case strings.HasPrefix(imp, "go.etcd.io/etcd/client") && !strings.HasPrefix(pkg, "lease/etcd") && pkg != "lease/fleetstore":
		return "only lease/etcd* and lease/fleetstore import the etcd client"
	case strings.HasPrefix(imp, "k8s.io/client-go") && pkg != "lease/kubestore":
		return "only lease/kubestore imports the Kubernetes client"
	case under(pkg, "failover") && isLocal && under(local, "cmd"):
		return "failover never imports cmd"
	}
	return ""
}

func anyUnder(pkg string, roots ...string) bool {
	for _, r := range roots {
		if under(pkg, r) {
			return true
		}
	}
	return false
}

// cmdImport says whether pkg may import the command package local: a
// command its own packages, and the docs generator the exit-code table it
// renders into docs/operations.md.
func cmdImport(pkg, local string) bool {
	parts := strings.SplitN(local, "/", 3)
	if len(parts) >= 2 && under(pkg, parts[0]+"/"+parts[1]) {
		return true
	}
	// The exit-code table is every leasebridge command's, the demo's too.
	return (pkg == "internal/docgen" || under(pkg, "cmd")) && local == "cmd/leasebridge/exitcode"
}

// planeRule holds the arrows between the control plane (failover), the
// data plane (dataplane), preflight, the fleet view and the command layer;
// a non-empty result is the violated rule.
func planeRule(pkg, local string, isLocal bool, imp string) string {
	switch {
	case under(pkg, "dataplane") && isLocal && anyUnder(local, "failover", "lease", "preflight", "fleetview"):
		return "the data plane knows no leases: it never imports failover, lease, preflight or fleetview (the owner guard is dataplane.Guard)"
	case under(pkg, "preflight") && isLocal && anyUnder(local, "failover", "lease", "fleetview"):
		return "preflight builds and opens nothing: it never imports failover, lease or fleetview"
	case under(pkg, "fleetview") && isLocal && anyUnder(local, "failover", "dataplane", "preflight", "transports"):
		return "the fleet view only reads rows: it never imports failover, dataplane, preflight or transports"
	case anyUnder(pkg, "failover", "dataplane", "preflight", "fleetview") && (imp == "net/http" || strings.HasPrefix(imp, "github.com/prometheus/client_golang/prometheus/promhttp")):
		return "HTTP is served at the command layer (cmd/leasebridge/httpapi)"
	case pkg == "cmd/leasebridge/exitcode" && imp != "":
		return "the exit-code table imports nothing"
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
		{"routes/suggest", mod + "/preflight"},
		{"lease", mod + "/transports/mqtt"},
		{"transports/mqtt", mod + "/lease"},
		{"failover", "go.etcd.io/etcd/client/v3"},
		{"failover", mod + "/cmd/leasebridge"},
		{"transports/modbus", mod + "/internal/testmqtt"},
		{"dataplane", mod + "/lease"},
		{"dataplane", mod + "/failover"},
		{"preflight", mod + "/failover"},
		{"fleetview", mod + "/failover"},
		{"fleetview", mod + "/transports/mqtt"},
		{"failover", "net/http"},
		{"lease", mod + "/dataplane"},
		{"transports/mqtt", mod + "/dataplane"},
		{"internal/report", mod + "/cmd/leasebridge/exitcode"},
		{"cmd/leasebridge/exitcode", "fmt"},
	} {
		if rule(c[0], c[1]) == "" {
			t.Errorf("%s -> %s was allowed", c[0], c[1])
		}
	}
	for _, c := range [][2]string{
		{"lease/etcdstore", "go.etcd.io/etcd/client/v3"},
		{"routes", mod + "/admission"},
		{"routes/suggest", mod + "/routes"},
		{"failover", mod + "/lease"},
		{"transports/mqtt", mod + "/routes"},
		{"failover", mod + "/dataplane"},
		{"failover", mod + "/preflight"},
		{"failover", mod + "/fleetview"},
		{"preflight", mod + "/dataplane"},
		{"dataplane", mod + "/transports/mqtt"},
		{"cmd/leasebridge", mod + "/cmd/leasebridge/httpapi"},
		{"cmd/leasebridge/httpapi", mod + "/failover"},
		{"internal/docgen", mod + "/cmd/leasebridge/exitcode"},
	} {
		if why := rule(c[0], c[1]); why != "" {
			t.Errorf("%s -> %s refused: %s", c[0], c[1], why)
		}
	}
}
