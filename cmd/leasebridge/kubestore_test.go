package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testkube"
)

// run on the Kubernetes lease store checks its verbs before anything
// else: a user with no Role is stopped with exit status 2 and a message
// naming every missing verb; bound to the shipped Role, only "patch"
// removed, it names "patch".
func TestRunStopsNamingMissingVerbs(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("verbs")
	kubeconfig := api.Kubeconfig(testkube.UserToken, "", ns)
	cfg := writeConfig(t, testbin.Config(testbin.Bridge{Kubernetes: "namespace: " + ns + ", kubeconfig: " + kubeconfig,
		Broker: "tcp://127.0.0.1:1", PLC: "127.0.0.1:1", Node: "n1", HTTP: testbin.FreeAddr(t), KeyPrefix: "/verbs/", Topic: "t/{tag}"}))
	code, _, errs := runCmd(t, "run", "-c", cfg)
	if code != exitInvalid || !strings.Contains(errs, "missing verb(s) get, list, watch, create, patch on leases.coordination.k8s.io in namespace \\\"verbs\\\"") {
		t.Fatalf("run with no Role: exit %d\n%s", code, errs)
	}
	role := api.ApplyRole("../../examples/kubernetes/lease-rbac.yaml", ns)
	role.Rules[0].Verbs = []string{"get", "list", "watch", "create"}
	if _, err := api.Admin().RbacV1().Roles(ns).Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC changes reach the authorizer through an informer: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, errs = runCmd(t, "run", "-c", cfg)
		if code == exitInvalid && strings.Contains(errs, "missing verb(s) patch on leases") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run with a Role lacking patch: exit %d\n%s", code, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
