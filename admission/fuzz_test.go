package admission_test

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/admission/admissiontest"
)

// FuzzEvaluate feeds arbitrary int64 inputs: Evaluate never panics, an
// admitted session's budgets equal the arbitrary-precision reference, and a
// budget that does not fit in int64 is always refused as an overflow.
func FuzzEvaluate(f *testing.F) {
	f.Add(int64(45e9), int64(10e9), int64(1e9), int64(3e9), int64(5e9), int64(5e9), int64(240e9), int64(0), int64(60e9))
	f.Add(int64(1<<62), int64(1), int64(0), int64(1<<61), int64(1), int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62))
	f.Fuzz(func(t *testing.T, l, r, j, c, p, g, a, s, b int64) {
		tm := admission.Timing{LeaseTTL: time.Duration(l), RenewInterval: time.Duration(r), RenewJitter: time.Duration(j),
			RenewCallTimeout: time.Duration(c), AcquirePollInterval: time.Duration(p), StepDownGrace: time.Duration(g), MaxRenewFails: 3}
		rep := admission.Evaluate(admission.Inputs{Session: "f", Timing: tm, StartupAllowance: time.Duration(s),
			BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOn, Threshold: time.Duration(b)},
			DevicePath:   admission.DevicePath{Threshold: time.Duration(b)},
			Transports:   []admission.Activation{{Name: "x", Bound: time.Duration(a)}}})
		if l <= 0 || r <= 0 || c <= 0 || p <= 0 || j < 0 || g < 0 || s < 0 || b <= 0 || a < 0 {
			if rep.Admitted() {
				t.Fatalf("out-of-range inputs admitted: %+v", tm)
			}
			return
		}
		ref := admissiontest.Timing{L: l, R: r, J: j, C: c, P: p, G: g, A: a, S: s, B: b}
		od, bp, dp := admissiontest.OwnerDeath(ref), admissiontest.BrokerPath(ref), admissiontest.DevicePath(ref)
		overflow := strings.Contains(strings.Join(rep.Refusals, "\n"), "overflows")
		if !admissiontest.Fits(od) || !admissiontest.Fits(bp) || !admissiontest.Fits(dp) {
			if rep.Admitted() || !overflow {
				t.Fatalf("budget beyond int64 (owner %s, broker %s) not refused as overflow: %q", od, bp, rep.Refusals)
			}
			return
		}
		spread := admission.Evaluate(admission.Inputs{Session: "f", Timing: tm, StartupAllowance: time.Duration(s), Spread: true,
			BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
			Transports:   []admission.Activation{{Name: "x", Bound: time.Duration(a)}}})
		if ods := admissiontest.OwnerDeathSpread(ref); spread.Admitted() && (!admissiontest.Fits(ods) || int64(spread.OwnerDeath.Total) != ods.Int64()) {
			t.Fatalf("owner death with spread %d, reference %s", spread.OwnerDeath.Total, ods)
		}
		if rep.Admitted() {
			if int64(rep.OwnerDeath.Total) != od.Int64() || int64(rep.BrokerPath.Total) != bp.Int64() || int64(rep.DevicePath.Total) != dp.Int64() {
				t.Fatalf("budgets %d/%d, reference %s/%s", rep.OwnerDeath.Total, rep.BrokerPath.Total, od, bp)
			}
		}
	})
}

// FuzzStoreRecovery feeds arbitrary lease and store timing: Evaluate never
// panics, an admitted session's owner-death budget equals the reference
// with store_recovery, one beyond int64 is refused as an overflow, and the
// election warning appears exactly when the reference ride-through exceeds
// fence_after.
func FuzzStoreRecovery(f *testing.F) {
	f.Add(int64(2e9), int64(3e8), int64(1e8), int64(2e8), int64(2e8), int64(1e8), int64(1e9))
	f.Add(int64(45e9), int64(10e9), int64(1e9), int64(3e9), int64(5e9), int64(1e9), int64(10e9))
	f.Add(int64(1<<62), int64(1), int64(0), int64(1<<40), int64(1), int64(1), int64(1<<61))
	f.Fuzz(func(t *testing.T, l, r, j, c, p, hb, et int64) {
		tm := admission.Timing{LeaseTTL: time.Duration(l), RenewInterval: time.Duration(r), RenewJitter: time.Duration(j),
			RenewCallTimeout: time.Duration(c), AcquirePollInterval: time.Duration(p), MaxRenewFails: 3}
		rep := admission.Evaluate(admission.Inputs{Session: "f", Timing: tm, BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
			Store: &admission.Store{HeartbeatInterval: time.Duration(hb), ElectionTimeout: time.Duration(et)}})
		if l <= 0 || r <= 0 || c <= 0 || p <= 0 || j < 0 || hb <= 0 || et <= 0 {
			if rep.Admitted() {
				t.Fatalf("out-of-range inputs admitted: %+v, store %d/%d", tm, hb, et)
			}
			return
		}
		ref := admissiontest.Timing{L: l, R: r, J: j, C: c, P: p, HB: hb, ET: et}
		od := admissiontest.OwnerDeathOnStore(ref)
		if !admissiontest.Fits(od) {
			if rep.Admitted() || !strings.Contains(strings.Join(rep.Refusals, "\n"), "overflows") {
				t.Fatalf("owner death %s beyond int64 not refused as overflow: %q", od, rep.Refusals)
			}
			return
		}
		if !rep.Admitted() {
			return
		}
		if int64(rep.OwnerDeath.Total) != od.Int64() {
			t.Fatalf("owner death %d, reference %s", rep.OwnerDeath.Total, od)
		}
		ride := admissiontest.ElectionRideThrough(ref)
		if warned := len(rep.Warnings) > 0; warned != (ride.Cmp(big.NewInt(int64(rep.FenceAfter))) > 0) {
			t.Fatalf("ride-through %s, fence_after %d: warnings %q", ride, rep.FenceAfter, rep.Warnings)
		}
	})
}
