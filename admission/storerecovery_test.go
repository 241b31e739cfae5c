package admission_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/admission/admissiontest"
)

const ms = time.Millisecond

// labTiming is the lab's lease timing (internal/testbin).
func labTiming() admission.Timing {
	return explicit(2*time.Second, 300*ms, 100*ms, 200*ms, 200*ms, 300*ms)
}

// The term at hand-computed points. Lab timing: mjp = 150ms, so the
// observation calls charge (1 + ceil(2s/150ms)) * 200ms = 15 * 0.2s = 3s.
func TestStoreRecoveryHandComputed(t *testing.T) {
	clustered, err := admission.ResolveTiming(admission.Clustered, admission.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		tm       admission.Timing
		hb, et   time.Duration
		election time.Duration
		want     time.Duration
	}{
		// E = 4*1s + 3*0.1s + 0.5s = 4.8s; 4.8s + 0.6s - 3s = 2.4s.
		{"lab, etcd defaults", labTiming(), 100 * ms, time.Second, 4800 * ms, 2400 * ms},
		// E = 0.4s + 0.03s + 0.5s = 0.93s; 0.93s + 0.6s < 3s.
		{"lab, fast election", labTiming(), 10 * ms, 100 * ms, 930 * ms, 0},
		// 4*et + 0.3s + 0.5s + 0.6s = 3s exactly at et = 0.4s: covered.
		{"lab, boundary", labTiming(), 100 * ms, 400 * ms, 2400 * ms, 0},
		{"lab, boundary + 1ns", labTiming(), 100 * ms, 400*ms + 1, 2400*ms + 4, 4},
		// Clustered: mjp = 3.75s, (1 + 12) * 3s = 39s; E + 9s = 13.8s.
		{"clustered, etcd defaults", clustered, 100 * ms, time.Second, 4800 * ms, 0},
		// E = 40s + 3s + 0.5s = 43.5s; 43.5s + 9s - 39s = 13.5s.
		{"clustered, slow election", clustered, time.Second, 10 * time.Second, 43500 * ms, 13500 * ms},
	} {
		s := admission.Store{HeartbeatInterval: tc.hb, ElectionTimeout: tc.et}
		e, err := admission.StoreElection(s)
		if err != nil || e != tc.election {
			t.Errorf("%s: E = %v, %v; want %v", tc.name, e, err, tc.election)
		}
		got, err := admission.StoreRecovery(tc.tm, s)
		if err != nil || got != tc.want {
			t.Errorf("%s: store_recovery = %v, %v; want %v", tc.name, got, err, tc.want)
		}
		rep := admission.Evaluate(admission.Inputs{Session: "s", Timing: tc.tm, Store: &s,
			BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff}})
		plain, err := admission.OwnerDeath(tc.tm, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OwnerDeath.Total != plain.Total+tc.want || !hasTerm(rep.OwnerDeath, "store_recovery", tc.want) || rep.StoreElection != tc.election {
			t.Errorf("%s: owner death %v (terms %v, E %v), want %v + %v", tc.name, rep.OwnerDeath.Total, rep.OwnerDeath.Terms, rep.StoreElection, plain.Total, tc.want)
		}
	}
}

func hasTerm(b admission.Budget, name string, v time.Duration) bool {
	for _, t := range b.Terms {
		if t.Name == name {
			return t.Value == v
		}
	}
	return false
}

// Without members there is no term at all: the budgets, the report and
// the seed's profile figures are unchanged.
func TestStoreRecoveryAbsentWithoutMembers(t *testing.T) {
	for _, mode := range []admission.Mode{admission.Standalone, admission.Clustered} {
		tm, err := admission.ResolveTiming(mode, admission.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		in := admission.Inputs{Session: "s", Timing: tm, Transports: []admission.Activation{{Name: "mqtt", Bound: mqttDefault}},
			BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff}}
		rep := admission.Evaluate(in)
		for _, term := range rep.OwnerDeath.Terms {
			if term.Name == "store_recovery" {
				t.Errorf("%s without members: store_recovery term %v", mode, term.Value)
			}
		}
		if rep.StoreElection != 0 || len(rep.Warnings) != 0 {
			t.Errorf("%s without members: E %v, warnings %q", mode, rep.StoreElection, rep.Warnings)
		}
		want := map[admission.Mode]string{admission.Standalone: "1097.5s", admission.Clustered: "336.5s"}[mode]
		if got := admission.FormatSeconds(rep.OwnerDeath.Total); got != want {
			t.Errorf("%s owner death %s, want %s", mode, got, want)
		}
		// With members at etcd's default timing the observation calls
		// cover the election: the term is there, and zero.
		in.Store = &admission.Store{HeartbeatInterval: 100 * ms, ElectionTimeout: time.Second}
		withStore := admission.Evaluate(in)
		if !hasTerm(withStore.OwnerDeath, "store_recovery", 0) || withStore.OwnerDeath.Total != rep.OwnerDeath.Total {
			t.Errorf("%s with members: %v", mode, withStore.OwnerDeath)
		}
	}
}

// Random inputs agree to the nanosecond with the arbitrary-precision
// reference, and inputs whose result does not fit in int64 are reported
// as overflows.
func TestStoreRecoveryAgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 5))
	overflows := 0
	for i := 0; i < 20000; i++ {
		tm := explicit(randDur(rng, time.Hour), randDur(rng, 10*time.Minute), randDur(rng, time.Minute),
			randDur(rng, 30*time.Second), randDur(rng, time.Minute), randDur(rng, time.Minute))
		s := admission.Store{HeartbeatInterval: randDur(rng, 5*time.Second), ElectionTimeout: randDur(rng, 2*time.Minute)}
		a, st := randDur(rng, 10*time.Minute), randDur(rng, time.Minute)
		if i%10 == 0 {
			// Near the edge of int64: some fit, some overflow.
			s.ElectionTimeout = time.Duration(math.MaxInt64/4 - rng.Int64N(1<<40))
		}
		ref := admissiontest.Timing{L: int64(tm.LeaseTTL), R: int64(tm.RenewInterval), J: int64(tm.RenewJitter),
			C: int64(tm.RenewCallTimeout), P: int64(tm.AcquirePollInterval), G: int64(tm.StepDownGrace), A: int64(a), S: int64(st),
			HB: int64(s.HeartbeatInterval), ET: int64(s.ElectionTimeout)}
		checkRef(t, "store_recovery", ref, func() (time.Duration, error) { return admission.StoreRecovery(tm, s) }, admissiontest.StoreRecovery(ref))
		checkRef(t, "owner death", ref, func() (time.Duration, error) {
			b, err := admission.OwnerDeathOnStore(tm, a, st, false, s)
			return b.Total, err
		}, admissiontest.OwnerDeathOnStore(ref))
		if !admissiontest.Fits(admissiontest.OwnerDeathOnStore(ref)) {
			overflows++
		}
		e, err := admission.StoreElection(s)
		if err == nil {
			checkRef(t, "ride-through", ref, func() (time.Duration, error) { return admission.ElectionRideThrough(tm, e) }, admissiontest.ElectionRideThrough(ref))
		}
	}
	if overflows < 100 || overflows > 1900 {
		t.Fatalf("%d of 20000 cases overflow: the edge of int64 is not exercised on both sides", overflows)
	}
}

func checkRef(t *testing.T, what string, ref admissiontest.Timing, got func() (time.Duration, error), want interface {
	IsInt64() bool
	Int64() int64
	String() string
}) {
	t.Helper()
	v, err := got()
	switch {
	case !want.IsInt64():
		if !errors.Is(err, admission.ErrOverflow) {
			t.Fatalf("%s, inputs %+v: reference %s beyond int64, got %v, %v", what, ref, want, v, err)
		}
	case err != nil:
		// An intermediate may overflow where the result would not only
		// if the result is within a factor of the limit.
		if want.Int64() < math.MaxInt64/8 {
			t.Fatalf("%s, inputs %+v: %v, reference %s", what, ref, err, want)
		}
	case int64(v) != want.Int64():
		t.Fatalf("%s, inputs %+v: %d, reference %s", what, ref, v, want)
	}
}

// The warning appears exactly when E + 4C + 2R + J exceeds fence_after,
// and each change it suggests removes it while one millisecond less of
// it does not.
func TestElectionFenceWarningBoundary(t *testing.T) {
	// L = 10s, R = 1s, J = 0, C = 0.5s, no transports: fence_after =
	// 10s - 0.01s = 9.99s; the ride-through is 4*et + 0.3s + 0.5s + 2s +
	// 2s, within 9.99s up to et = 1.2975s: 1.297s in whole milliseconds.
	tm := explicit(10*time.Second, time.Second, 0, 500*ms, time.Second, time.Second)
	tm.Origins = map[string]admission.Origin{"lease_ttl": admission.Pinned, "renew_interval": admission.Pinned, "lease_renew_jitter": admission.Pinned}
	eval := func(tm admission.Timing, et time.Duration) admission.Report {
		return admission.Evaluate(admission.Inputs{Session: "s", Timing: tm, BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
			Store: &admission.Store{HeartbeatInterval: 100 * ms, ElectionTimeout: et}})
	}
	if r := eval(tm, 1297*ms); len(r.Warnings) != 0 || !r.Admitted() {
		t.Fatalf("et 1.297s: warned %q (refusals %q)", r.Warnings, r.Refusals)
	}
	r := eval(tm, 1298*ms)
	if len(r.Warnings) != 1 || !r.Admitted() {
		t.Fatalf("et 1.298s: warnings %q, refusals %q", r.Warnings, r.Refusals)
	}
	for _, want := range []string{"E = 4*election_timeout + 3*heartbeat_interval + 0.5s = 5.992s", "= 9.992s <= fence_after = 9.99s", "lease_store.election_timeout <= 1.297s", "lease_ttl >= 10.003s"} {
		if !strings.Contains(r.Warnings[0], want) {
			t.Errorf("warning lacks %q:\n%s", want, r.Warnings[0])
		}
	}
	// et = 2s: E = 8.8s, ride-through 12.8s; lease_ttl - ceil(lease_ttl/1000)
	// >= 12.8s from 12.813s on.
	if l, ok := admission.LeaseTTLForElection(tm, 0, 8800*ms); !ok || l != 12813*ms {
		t.Fatalf("lease_ttl for E = 8.8s: %v, %v; want 12.813s", l, ok)
	}
	for _, l := range []time.Duration{12812 * ms, 12813 * ms} {
		tl := tm
		tl.LeaseTTL = l
		if r := eval(tl, 2*time.Second); (len(r.Warnings) == 0) != (l == 12813*ms) {
			t.Errorf("lease_ttl %v: warnings %q", l, r.Warnings)
		}
	}
}

// With renew_interval derived, the suggested lease_ttl takes the cadence
// derived from it: clustered profile, election_timeout 10s, heartbeat 1s
// (E = 43.5s) needs 49.5s + L/2 <= L - L/1000, so L >= 99.199s.
func TestElectionFenceSuggestsDerivedLeaseTTL(t *testing.T) {
	tm, err := admission.ResolveTiming(admission.Clustered, admission.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	store := &admission.Store{HeartbeatInterval: time.Second, ElectionTimeout: 10 * time.Second}
	r := admission.Evaluate(admission.Inputs{Session: "s", Timing: tm, Store: store, BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff}})
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "set lease_ttl >= 99.199s (renew_interval and lease_renew_jitter derived from it)") {
		t.Fatalf("warnings %q", r.Warnings)
	}
	if !strings.Contains(r.Warnings[0], "no election_timeout of at least 5 heartbeat_interval does") {
		t.Errorf("an election_timeout below 5 heartbeats was offered: %q", r.Warnings[0])
	}
	for _, l := range []time.Duration{99198 * ms, 99199 * ms} {
		lt, err := admission.ResolveTiming(admission.Clustered, admission.Overrides{LeaseTTL: &l})
		if err != nil {
			t.Fatal(err)
		}
		r := admission.Evaluate(admission.Inputs{Session: "s", Timing: lt, Store: store, BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff}})
		if (len(r.Warnings) == 0) != (l == 99199*ms) || !r.Admitted() {
			t.Errorf("lease_ttl %v: warnings %q, refusals %q", l, r.Warnings, r.Refusals)
		}
	}
}

// Store timing without a positive heartbeat or election timeout is
// refused, naming the key.
func TestStoreTimingRanges(t *testing.T) {
	r := admission.Evaluate(admission.Inputs{Session: "s", Timing: labTiming(), BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
		Store: &admission.Store{HeartbeatInterval: 0, ElectionTimeout: -1}})
	got := strings.Join(r.Refusals, "\n")
	if !strings.Contains(got, "lease_store.heartbeat_interval = 0s: must be > 0") || !strings.Contains(got, "lease_store.election_timeout = -0.000000001s: must be > 0") {
		t.Fatalf("refusals %q", r.Refusals)
	}
}
