package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
)

// The shipped binary carries only what runs: the demo's MQTT broker,
// Modbus server, PLC simulator and fault proxy live in cmd/leasebridge-demo
// and the tests, never in what `go list -deps` says leasebridge links.
func TestShippedBinaryCarriesNoTestServers(t *testing.T) {
	deps := shippedDeps(t)
	forbidden := []string{
		"github.com/mochi-mqtt/server",  // MQTT broker
		"github.com/simonvetter/modbus", // Modbus server (and client) the simulator uses
		"github.com/leasebridge/leasebridge/internal/plcsim",
		"github.com/leasebridge/leasebridge/internal/faultproxy",
		"github.com/leasebridge/leasebridge/internal/embedbroker",
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("leasebridge links %s", dep)
			}
		}
	}
}

// shippedDeps is what `go list -deps` says leasebridge links.
func shippedDeps(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "github.com/leasebridge/leasebridge/cmd/leasebridge").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 || !strings.Contains(string(out), "\ngithub.com/leasebridge/leasebridge/failover\n") {
		t.Fatalf("go list -deps printed %d packages, not leasebridge's dependencies:\n%s", len(deps), out)
	}
	return deps
}

// The Kubernetes lease store links only the API types it uses, never
// client-go's typed clientset or its scheme: they register every API group
// of Kubernetes and doubled the binary (40 to 89 MB) and its resident
// pages in every process, on etcd too (lease/kubestore/client.go).
func TestBinaryLinksNoClientset(t *testing.T) {
	allowedAPI := map[string]bool{"k8s.io/api/coordination/v1": true, "k8s.io/api/authorization/v1": true}
	var api []string
	for _, dep := range shippedDeps(t) {
		if dep == "k8s.io/client-go/kubernetes" || strings.HasPrefix(dep, "k8s.io/client-go/kubernetes/") {
			t.Errorf("leasebridge links %s", dep)
		}
		if strings.HasPrefix(dep, "k8s.io/api/") {
			api = append(api, dep)
			if !allowedAPI[dep] {
				t.Errorf("leasebridge links API group %s; the lease store needs only %v", dep, allowedAPI)
			}
		}
	}
	if len(api) != len(allowedAPI) {
		t.Errorf("leasebridge links API packages %v, want exactly %v (is the Kubernetes store still linked?)", api, allowedAPI)
	}
}

// `leasebridge demo` says where the demo went and exits 2.
func TestDemoNotInShippedBinary(t *testing.T) {
	code, out, errs := runCmd(t, "demo")
	if code != exitInvalid || out != "" || !strings.Contains(errs, "go run ./cmd/leasebridge-demo") || !strings.Contains(errs, "scripts/demo") {
		t.Errorf("demo: exit %d, want %d and where the demo went:\n%s%s", code, exitInvalid, out, errs)
	}
	if _, ok := lookup("demo"); ok {
		t.Error("demo is still in the command table")
	}
}

// Numbers the README states about exit statuses come from the code.
func TestReadmeExitStatuses(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, want := range []string{
		"Exit " + itoa(exitcode.Admitted) + " admitted, " + itoa(exitcode.Refused) + " refused, " + itoa(exitcode.Invalid) + " invalid",
		"exits " + itoa(exitcode.Refused) + " before any store",
		"exits " + itoa(exitcode.StepDown),
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
