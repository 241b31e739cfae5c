package main

import (
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/routes"
)

// fastTiming is the second-scale lease timing of the fleet-store example
// in failover-budget.md, with its close bound.
var fastTiming = admission.Timing{LeaseTTL: 2 * time.Second, RenewInterval: 300 * time.Millisecond, RenewJitter: 100 * time.Millisecond,
	RenewCallTimeout: 200 * time.Millisecond, AcquirePollInterval: 200 * time.Millisecond, StepDownGrace: 300 * time.Millisecond,
	MaxRenewFails: admission.DefaultMaxRenewFails, Origins: map[string]admission.Origin{
		"lease_ttl": admission.Pinned, "renew_interval": admission.Pinned, "lease_renew_jitter": admission.Pinned}}

const fastClose = 400 * time.Millisecond

// storeData is the fleet-store section's numbers: the election bound at
// the members' default timing, and store_recovery and the election fence
// at the clustered profile and at fastTiming.
func storeData(cl report.Profile) (map[string]any, error) {
	fs := admission.FormatSeconds
	s := admission.Store{HeartbeatInterval: routes.DefaultStoreHeartbeat, ElectionTimeout: routes.DefaultStoreElection}
	e, err := admission.StoreElection(s)
	if err != nil {
		return nil, err
	}
	clRec, err := admission.StoreRecovery(cl.Timing, s)
	if err != nil {
		return nil, err
	}
	fastRec, err := admission.StoreRecovery(fastTiming, s)
	if err != nil {
		return nil, err
	}
	fastOD, err := admission.OwnerDeath(fastTiming, 0, 0)
	if err != nil {
		return nil, err
	}
	ride, err := admission.ElectionRideThrough(fastTiming, e)
	if err != nil {
		return nil, err
	}
	fix, _ := admission.LeaseTTLForElection(fastTiming, fastClose, e)
	observation := func(b admission.Budget) string {
		for _, t := range b.Terms {
			if t.Name == "observation_calls" {
				return fs(t.Value)
			}
		}
		return "?"
	}
	c := fastTiming
	return map[string]any{
		"StoreDisk": fs(admission.StoreDiskAllowance), "StoreHB": fs(s.HeartbeatInterval), "StoreET": fs(s.ElectionTimeout),
		"StoreE": fs(e), "MinElectionHB": admission.MinElectionHeartbeats,
		"ClusteredStoreNeed": fs(e + 3*cl.Timing.RenewCallTimeout), "ClusteredObservation": observation(cl.OwnerDeath),
		"ClusteredStoreRecovery": fs(clRec),
		"FastL":                  fs(c.LeaseTTL), "FastR": fs(c.RenewInterval), "FastJ": fs(c.RenewJitter), "FastC": fs(c.RenewCallTimeout),
		"FastP": fs(c.AcquirePollInterval), "FastClose": fs(fastClose), "FastStoreNeed": fs(e + 3*c.RenewCallTimeout),
		"FastObservation": observation(fastOD), "FastStoreRecovery": fs(fastRec), "FastRide": fs(ride),
		"FastFenceAfter": fs(c.LeaseTTL - fastClose - admission.ClockRateMargin(c.LeaseTTL)), "FastFix": fs(fix),
	}, nil
}
