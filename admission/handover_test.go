package admission_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// close + 3C + ceil(5P/4) + C + A, term by term.
func TestHandoverBudgetTerms(t *testing.T) {
	tm := explicit(45*time.Second, 10*time.Second, time.Second, 3*time.Second, 5*time.Second, 5*time.Second)
	b, err := admission.Handover(tm, 7*time.Second, 11*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := 7*time.Second + 9*time.Second + (6250*time.Millisecond + 3*time.Second) + 11*time.Second
	if b.Total != want {
		t.Fatalf("handover budget = %s, want %s (terms %+v)", b.Total, want, b.Terms)
	}
	names := []string{"close", "release", "standby_pickup", "activation"}
	for i, term := range b.Terms {
		if term.Name != names[i] {
			t.Fatalf("term %d = %q, want %q", i, term.Name, names[i])
		}
	}
}

func TestHandoverBudgetOverflowNamesTheTerm(t *testing.T) {
	tm := explicit(45*time.Second, 10*time.Second, time.Second, math.MaxInt64/2, 5*time.Second, 5*time.Second)
	if _, err := admission.Handover(tm, 0, 0); !errors.Is(err, admission.ErrOverflow) {
		t.Fatalf("huge renew_call_timeout: err = %v, want ErrOverflow", err)
	}
	tm = explicit(45*time.Second, 10*time.Second, time.Second, time.Second, 5*time.Second, 5*time.Second)
	if _, err := admission.Handover(tm, math.MaxInt64-time.Second, time.Hour); !errors.Is(err, admission.ErrOverflow) {
		t.Fatalf("huge close bound: err = %v, want ErrOverflow", err)
	}
}
