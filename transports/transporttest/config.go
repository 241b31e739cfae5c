package transporttest

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
)

// ConfigBase starts a configuration file with one broker, local, and an
// open devices mapping: a kind's configuration test adds its devices,
// indented by two spaces, and then ConfigRoute or routes of its own.
const ConfigBase = `deployment_mode: clustered
lease_store: {endpoints: [http://127.0.0.1:2379]}
manager: {failover_slo: 10m, broker_health_step_down: 60s}
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
`

// ConfigRoute is a poll route of device plc.
const ConfigRoute = `routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`

// ConfigErrors parses the configuration y, as file cfg.yaml, and returns
// its problems, one per line, or nil.
func ConfigErrors(t *testing.T, y string) []string {
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

// WantConfigErrors fails unless y has exactly one problem per want, in
// order, each starting with it.
func WantConfigErrors(t *testing.T, y string, want ...string) {
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
