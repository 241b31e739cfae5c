package admission_test

import (
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Huge values whose budget still fits in int64 nanoseconds are computed,
// not refused as overflows of an intermediate product.
func TestNoIntermediateOverflow(t *testing.T) {
	p := 1_000_000 * time.Hour // 5P overflows int64; ceil(5P/4) does not
	b, err := admission.PollBoundary(p)
	if err != nil || b != p+p/4 {
		t.Fatalf("PollBoundary(%v) = %v, %v", p, b, err)
	}
	if _, err := admission.PollBoundary(time.Duration(1<<63 - 1)); err == nil {
		t.Fatal("PollBoundary(max) did not report the overflow")
	}
}

func TestHugeLeaseTTLDerives(t *testing.T) {
	l := 1_300_000 * time.Hour // 8*(L/4 - C) overflows int64; R does not
	tm, err := admission.ResolveTiming(admission.Clustered, admission.Overrides{LeaseTTL: &l})
	if err != nil {
		t.Fatalf("ResolveTiming(lease_ttl %v): %v", l, err)
	}
	round := l/admission.RenewRoundsPerTTL - tm.RenewCallTimeout
	if tm.RenewInterval+tm.RenewJitter/2 > round || tm.RenewInterval <= 0 {
		t.Fatalf("renew_interval %v + jitter/2 %v exceeds the round %v", tm.RenewInterval, tm.RenewJitter/2, round)
	}
}

// The overflow-free derivation equals floor(8*round/9) wherever 8*round fits.
func TestRenewDerivationMatchesProduct(t *testing.T) {
	for _, l := range []time.Duration{45 * time.Second, 360 * time.Second, 27*time.Second + 3, 1234567891011} {
		tm, err := admission.ResolveTiming(admission.Standalone, admission.Overrides{LeaseTTL: &l})
		if err != nil {
			t.Fatal(err)
		}
		round := l/admission.RenewRoundsPerTTL - tm.RenewCallTimeout
		if want := round * 8 / 9; tm.RenewInterval != want {
			t.Errorf("lease_ttl %v: renew_interval %v, want floor(8*%v/9) = %v", l, tm.RenewInterval, round, want)
		}
	}
}
