package failover_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testbin"
)

// Two fleets (two key_prefix values) on one gateway name the same PLC.
// Each owns its own lease row, but the second to become owner finds the
// first's endpoint claim and does not activate: it says so in its log,
// metric and status, and the PLC never sees its connection. When the
// first fleet releases, the second claims the endpoint and serves.
func TestSecondFleetDoesNotOpenAClaimedDevice(t *testing.T) {
	p := startPeers(t)
	a := p.bridgeOf(t, "gw", "/fleet-a/", nil)
	waitFull(t, a, a.report.OwnerDeath.Total)
	var logs testbin.SyncBuffer
	b := p.bridgeOf(t, "gw", "/fleet-b/", &logs)

	testbin.Observe(t, b.report.OwnerDeath.Total, func() (bool, string) {
		s := b.status()
		return s.Owner && s.EndpointConflict != "", fmt.Sprintf("fleet-b reporting the conflict within its owner-death budget: %+v", s)
	})
	endpoint := fmt.Sprintf("modbus_tcp://localhost:%s on gw", p.plc.Addr()[strings.LastIndexByte(p.plc.Addr(), ':')+1:])
	s := b.status()
	if s.ServiceLevelFull || !strings.Contains(s.EndpointConflict, endpoint) || !strings.Contains(s.EndpointConflict, `key_prefix "/fleet-a/" session "plc"`) {
		t.Errorf("fleet-b status %+v", s)
	}
	if _, metrics := get(t, b.http.URL+"/metrics"); !strings.Contains(metrics, `leasebridge_endpoint_claim_conflicts{session="plc"} 1`) {
		t.Errorf("fleet-b /metrics lacks the conflict")
	}
	if _, metrics := get(t, a.http.URL+"/metrics"); !strings.Contains(metrics, `leasebridge_endpoint_claim_conflicts{session="plc"} 0`) {
		t.Errorf("fleet-a /metrics lacks a zero conflict gauge")
	}
	for _, want := range []string{`"level":"ERROR"`, `"endpoint":"` + endpoint + `"`, `"key_prefix":"/fleet-b/"`, `"other_key_prefix":"/fleet-a/"`, `"other_session":"plc"`, `"session":"plc"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("fleet-b log lacks %s:\n%s", want, logs.String())
		}
	}

	// fleet-a stops in order: its term closes, then its claim is revoked.
	stop := time.Now()
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("fleet-a stop: %v", err)
	}
	waitFull(t, b, b.report.OwnerDeath.Total)
	if s := b.status(); s.EndpointConflict != "" {
		t.Errorf("fleet-b serves with a conflict: %+v", s)
	}
	if _, metrics := get(t, b.http.URL+"/metrics"); !strings.Contains(metrics, `leasebridge_endpoint_claim_conflicts{session="plc"} 0`) {
		t.Errorf("fleet-b /metrics still shows the conflict")
	}
	// The witness is the device: never two connections at once.
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("the PLC saw %d concurrent connections", peak)
	}
	t.Logf("fleet-b at ServiceLevelFull %s after fleet-a's stop", time.Since(stop))
}
