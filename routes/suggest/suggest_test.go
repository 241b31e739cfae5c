package suggest_test

import (
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes/suggest"
)

// Apply sets a written key in place, adds a missing one under its block,
// and adds a missing block with it, each change saying where it goes.
func TestApplyChanges(t *testing.T) {
	src := "deployment_mode: clustered\nbrokers:\n  local:\n    url: tcp://h:1883\n    connect_timeout: 30s\n"
	out, chs, err := suggest.Apply("f.yaml", []byte(src), []suggest.Change{
		{Path: "brokers.local.connect_timeout", From: "30s", To: "5s"},
		{Path: "brokers.local.reconcile_timeout", From: "30s", To: "4s"},
		{Path: "manager.lease_ttl", From: "45s", To: "20s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"f.yaml:5: brokers.local.connect_timeout: 30s -> 5s",
		"f.yaml:3: add reconcile_timeout: 4s under brokers.local (now 30s)",
		"f.yaml:0: add manager.lease_ttl: 20s at the top level (now 45s)",
	}
	for i, ch := range chs {
		if ch.String() != want[i] {
			t.Errorf("change %d: %q, want %q", i, ch, want[i])
		}
	}
	for _, s := range []string{"connect_timeout: 5s", "reconcile_timeout: 4s", "manager:\n    lease_ttl: 20s"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("applied text lacks %q:\n%s", s, out)
		}
	}
	if _, _, err := suggest.Apply("f.yaml", []byte(src), []suggest.Change{{Path: "brokers.local.url.x", To: "1s"}}); err == nil {
		t.Error("a path through a scalar was applied")
	}
}
