package failover

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// The startup log carries every warning admission gave a session, and
// nothing more when there is none.
func TestLogBudgetsWarns(t *testing.T) {
	tm := admission.Timing{LeaseTTL: 2 * time.Second, RenewInterval: 300 * time.Millisecond, RenewJitter: 100 * time.Millisecond,
		RenewCallTimeout: 200 * time.Millisecond, AcquirePollInterval: 200 * time.Millisecond, MaxRenewFails: 3}
	in := admission.Inputs{Session: "s", Timing: tm, BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff}}
	plain := admission.Evaluate(in)
	in.Store = &admission.Store{HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second}
	store := admission.Evaluate(in)
	for _, tc := range []struct {
		r    admission.Report
		warn bool
	}{{plain, false}, {store, true}} {
		var b bytes.Buffer
		LogBudgets(slog.New(slog.NewTextHandler(&b, nil)), []admission.Report{tc.r})
		if got := strings.Contains(b.String(), "level=WARN") && strings.Contains(b.String(), "store election"); got != tc.warn {
			t.Errorf("warnings %q logged as\n%s", tc.r.Warnings, b.String())
		}
	}
}
