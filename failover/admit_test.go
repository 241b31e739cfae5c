package failover_test

import (
	"testing"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// admit is what admit and run compute for cfg (preflight.Admit), failing
// the test on a problem preflight finds.
func admit(t testing.TB, cfg *routes.Config) []admission.Report {
	t.Helper()
	reports, errs := preflight.Admit(cfg, true)
	if len(errs) > 0 {
		t.Fatalf("preflight: %v", errs)
	}
	return reports
}
