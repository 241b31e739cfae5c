package admission_test

import (
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// TestTermPartsAddUp checks that every term that is broken down is the
// sum of its parts, in every budget, for both profiles with and without
// spread: a term whose formula changes without its parts fails here.
func TestTermPartsAddUp(t *testing.T) {
	for _, mode := range []admission.Mode{admission.Standalone, admission.Clustered} {
		for _, spread := range []bool{false, true} {
			tm, err := admission.ResolveTiming(mode, admission.Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			slo := time.Hour
			in := admission.Inputs{Session: "s", Timing: tm, Spread: spread, FailoverSLO: &slo, StartupAllowance: 7 * time.Second,
				BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOn, Threshold: 30 * time.Second},
				DevicePath:   admission.DevicePath{Threshold: 20 * time.Second},
				Transports: []admission.Activation{
					{Name: "mqtt:local", Entry: "brokers.local", Bound: 18 * time.Second, Parts: admission.MQTTActivationParts(2*time.Second, 2*time.Second, 3*time.Second)},
					{Name: "opaque", Bound: 5 * time.Second},
				}}
			r := admission.Evaluate(in)
			if !r.Admitted() {
				t.Fatalf("%s: %v", mode, r.Refusals)
			}
			hb, err := admission.HandoverOf(r)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range []*admission.Budget{&r.OwnerDeath, r.BrokerPath, r.DevicePath, &hb} {
				for _, term := range b.Terms {
					if term.Parts == nil {
						continue
					}
					var sum time.Duration
					for _, p := range term.Parts {
						sum += time.Duration(p.Count) * p.Each
					}
					if sum != term.Value {
						t.Errorf("%s spread=%v: %s = %v, its parts add up to %v: %+v", mode, spread, term.Name, term.Value, sum, term.Parts)
					}
				}
			}
		}
	}
}
