package routes_test

import (
	"strings"
	"testing"
)

const kubeTail = `manager: {failover_slo: 10m, broker_health_step_down: 60s}
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
  press: {kind: modbus_tcp, address: "10.0.0.5:502", groups: [{name: g, tags: [{name: t, address: "1", type: int16, register: holding}]}]}
routes:
  - {name: telemetry, session: press, kind: poll, device: press, broker: local}
`

// A clustered file with lease_store.kubernetes and no etcd endpoints is
// valid and names its backend.
func TestKubernetesStoreAccepted(t *testing.T) {
	cfg, errs := parse(t, "deployment_mode: clustered\nlease_store: {kubernetes: {namespace: plant-a}}\n"+kubeTail)
	if errs != nil {
		t.Fatal(errs)
	}
	if got := cfg.StoreBackend(); got != "kubernetes Leases in namespace plant-a" {
		t.Fatalf("backend %q", got)
	}
	cfg, errs = parse(t, "deployment_mode: clustered\nlease_store:\n  kubernetes: {}\n"+kubeTail)
	if errs != nil || cfg.StoreBackend() != "kubernetes Leases in the pod's namespace" {
		t.Fatalf("%v %q", errs, cfg.StoreBackend())
	}
}

// The etcd keys beside kubernetes and a namespace Kubernetes cannot name
// are refused at their lines, with the rule.
func TestKubernetesStoreRefusalsNamePositions(t *testing.T) {
	y := `deployment_mode: clustered
lease_store:
  endpoints: [http://127.0.0.1:2379]
  username: bridge
  kubernetes:
    namespace: Plant_A
` + kubeTail
	_, errs := parse(t, y)
	for _, want := range []string{
		"cfg.yaml:3:3: lease_store.endpoints: endpoints and kubernetes are two lease stores: set one",
		"cfg.yaml:4:3: lease_store.username: username is an etcd setting, unused with kubernetes",
		`cfg.yaml:6:5: lease_store.kubernetes.namespace: namespace "Plant_A": want a Kubernetes namespace name (lowercase letters, digits and '-', at most 63 characters`,
	} {
		if errs == nil || !strings.Contains(errs.Error(), want) {
			t.Errorf("errors %v, want one containing %q", errs, want)
		}
	}
}
