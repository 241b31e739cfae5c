// Package admittest admits a configuration in tests the way `leasebridge
// admit` and `run` do. It is its own package so that internal/testbin
// stays free of preflight, which internal tests of preflight's own
// dependencies (dataplane, transports) could then not import.
package admittest

import (
	"testing"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// Admit is what `leasebridge admit` and `run` compute for cfg
// (preflight.Admit, the device probes of run included), failing tb on a
// problem preflight finds: the budgets in-process bridges are held to.
func Admit(tb testing.TB, cfg *routes.Config) []admission.Report {
	tb.Helper()
	reports, errs := preflight.Admit(cfg, true)
	if len(errs) > 0 {
		tb.Fatalf("preflight: %v", errs)
	}
	return reports
}
