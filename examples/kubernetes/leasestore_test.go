package kubernetes

import (
	"slices"
	"testing"

	"github.com/leasebridge/leasebridge/lease/kubestore"
)

// The Kubernetes lease store example: a hardened bridge with no etcd,
// whose configuration keeps its rows as Leases in its own namespace, run
// as the ServiceAccount that lease-rbac.yaml binds to a Role granting
// exactly the verbs the store uses (kubestore.Verbs) on leases, in that
// namespace and nowhere else.
func TestKubernetesLeaseStore(t *testing.T) {
	m := decode(t, "lease-store.yaml")
	checkHardened(t, m)
	checkBridge(t, m)
	cfg := m.bridgeConfig(t)
	k := cfg.LeaseStore.Kubernetes
	if k == nil || len(cfg.LeaseStore.Endpoints) > 0 || len(cfg.LeaseStore.Members) > 0 || k.Kubeconfig != "" {
		t.Fatalf("lease_store %+v: want kubernetes with the pod's service account and no etcd", cfg.LeaseStore)
	}
	pod, _ := m.bridge(t)
	dep := m.deployments[0]
	if k.Namespace != dep.Namespace {
		t.Errorf("Leases in namespace %q, the pods run in %q", k.Namespace, dep.Namespace)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || !*pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the pod does not mount its service account token, the store's credential")
	}
	rbac := decode(t, "lease-rbac.yaml")
	if len(rbac.accounts) != 1 || len(rbac.roles) != 1 || len(rbac.bindings) != 1 {
		t.Fatalf("lease-rbac.yaml: %d ServiceAccounts, %d Roles, %d RoleBindings, want one each", len(rbac.accounts), len(rbac.roles), len(rbac.bindings))
	}
	sa, role, rb := rbac.accounts[0], rbac.roles[0], rbac.bindings[0]
	if sa.Name != pod.Spec.ServiceAccountName || sa.Namespace != dep.Namespace {
		t.Errorf("ServiceAccount %s/%s, the pods run as %s/%s", sa.Namespace, sa.Name, dep.Namespace, pod.Spec.ServiceAccountName)
	}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].APIGroups, []string{"coordination.k8s.io"}) ||
		!slices.Equal(role.Rules[0].Resources, []string{"leases"}) || !slices.Equal(role.Rules[0].Verbs, kubestore.Verbs) ||
		len(role.Rules[0].ResourceNames) != 0 || role.Namespace != dep.Namespace {
		t.Errorf("Role %s/%s rules %+v: want exactly %v on coordination.k8s.io leases in %s", role.Namespace, role.Name, role.Rules, kubestore.Verbs, dep.Namespace)
	}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || rb.Namespace != dep.Namespace ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("RoleBinding %+v does not bind Role %s to ServiceAccount %s/%s alone", rb, role.Name, sa.Namespace, sa.Name)
	}
}
