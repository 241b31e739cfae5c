package transporttest

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
)

// ConfigErrors parses the configuration y as cfg.yaml and returns its
// problems, one per line, or nil when it is valid.
func ConfigErrors(t testing.TB, y string) []string {
	t.Helper()
	_, err := routes.Parse("cfg.yaml", []byte(y))
	if err == nil {
		return nil
	}
	var errs routes.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v is not routes.Errors", err)
	}
	return strings.Split(errs.Error(), "\n")
}

// WantConfigErrors asserts that y has exactly the problems want, in
// order, each given by a prefix (file:line:column: path: message).
func WantConfigErrors(t testing.TB, y string, want ...string) {
	t.Helper()
	got := ConfigErrors(t, y)
	if len(got) != len(want) {
		t.Fatalf("errors %q, want %d: %q", got, len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("error %q, want it to start %q", got[i], w)
		}
	}
}

// ConfigHead is a valid clustered configuration up to an empty devices
// key (line 6), for a kind's test to append its devices and routes to;
// its broker is named local.
const ConfigHead = `deployment_mode: clustered
lease_store: {endpoints: [http://127.0.0.1:2379]}
manager: {failover_slo: 10m, broker_health_step_down: 60s}
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
`
