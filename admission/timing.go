package admission

import (
	"errors"
	"fmt"
	"time"
)

// Mode is a deployment mode; it picks the lease profile a session inherits
// when it pins neither lease_ttl nor renew_interval.
type Mode string

// The two deployment modes.
const (
	Standalone Mode = "standalone"
	Clustered  Mode = "clustered"
)

// ErrUnknownMode reports a deployment mode other than standalone or clustered.
var ErrUnknownMode = errors.New("admission: unknown deployment_mode")

// Origin says where a resolved timing value came from.
type Origin string

// Origins of a resolved value.
const (
	Pinned  Origin = "pinned"  // set in the configuration
	Profile Origin = "profile" // the deployment mode's baseline
	Derived Origin = "derived" // computed from other values
)

// Profile values. Every number in docs/failover-budget.md comes from these.
const (
	StandaloneLeaseTTL      = 360 * time.Second
	StandaloneCallTimeout   = 5 * time.Second
	StandalonePollInterval  = 5 * time.Second
	StandaloneStepDownGrace = 15 * time.Second

	ClusteredLeaseTTL      = 45 * time.Second
	ClusteredRenewInterval = 10 * time.Second
	ClusteredRenewJitter   = 1 * time.Second
	ClusteredCallTimeout   = 3 * time.Second
	ClusteredPollInterval  = 5 * time.Second
	ClusteredStepDownGrace = 5 * time.Second

	// DefaultMaxRenewFails is the renew failure streak after which every
	// later round also runs the authoritative ownership read.
	DefaultMaxRenewFails = 3

	// RenewRoundsPerTTL is how many renewal rounds at their longest
	// (renew_interval + lease_renew_jitter/2 + renew_call_timeout) a derived
	// cadence fits into one lease_ttl.
	RenewRoundsPerTTL = 4
)

// Overrides are the lease-timing manager inputs a configuration may pin; nil
// means not pinned.
type Overrides struct {
	LeaseTTL            *time.Duration
	RenewInterval       *time.Duration
	RenewJitter         *time.Duration
	RenewCallTimeout    *time.Duration
	AcquirePollInterval *time.Duration
	StepDownGrace       *time.Duration
	MaxRenewFails       *int
}

// Timing is a session's resolved lease cadence.
type Timing struct {
	LeaseTTL            time.Duration `json:"lease_ttl_ns"`
	RenewInterval       time.Duration `json:"renew_interval_ns"`
	RenewJitter         time.Duration `json:"lease_renew_jitter_ns"`
	RenewCallTimeout    time.Duration `json:"renew_call_timeout_ns"`
	AcquirePollInterval time.Duration `json:"acquire_poll_interval_ns"`
	StepDownGrace       time.Duration `json:"step_down_grace_ns"`
	MaxRenewFails       int           `json:"max_renew_fails"`
	// Origins maps each field's config key to where its value came from.
	Origins map[string]Origin `json:"origins"`
}

// ResolveTiming applies the deployment mode's profile and the derivation
// rules to the pinned values:
//
//   - neither lease_ttl nor renew_interval pinned: standalone takes
//     lease_ttl 360s and derives the renew cadence; clustered takes
//     45s / 10s / jitter 1s.
//   - lease_ttl known, renew_interval not: renew_interval is derived so that
//     RenewRoundsPerTTL rounds of (renew_interval + jitter/2 +
//     renew_call_timeout) fill lease_ttl, with jitter = renew_interval/4
//     unless pinned.
//   - renew_interval pinned, lease_ttl not: lease_ttl is RenewRoundsPerTTL
//     such rounds, with jitter = renew_interval/4 unless pinned.
//
// ResolveTiming rejects only what makes the derivation impossible; the
// safety rules are checked by Evaluate.
func ResolveTiming(mode Mode, o Overrides) (Timing, error) {
	t := Timing{Origins: map[string]Origin{}}
	var base struct{ l, r, j, c, p, g time.Duration }
	switch mode {
	case Standalone:
		base.l, base.c, base.p, base.g = StandaloneLeaseTTL, StandaloneCallTimeout, StandalonePollInterval, StandaloneStepDownGrace
	case Clustered:
		base.l, base.r, base.j = ClusteredLeaseTTL, ClusteredRenewInterval, ClusteredRenewJitter
		base.c, base.p, base.g = ClusteredCallTimeout, ClusteredPollInterval, ClusteredStepDownGrace
	default:
		return t, fmt.Errorf("%w %q: want standalone or clustered", ErrUnknownMode, mode)
	}
	pick := func(key string, p *time.Duration, def time.Duration, origin Origin) time.Duration {
		if p != nil {
			t.Origins[key] = Pinned
			return *p
		}
		t.Origins[key] = origin
		return def
	}
	// In standalone mode the call timeout and poll are part of the derived
	// cadence; in clustered mode they are the profile's fixed values.
	fixed := Profile
	if mode == Standalone {
		fixed = Derived
	}
	t.RenewCallTimeout = pick("renew_call_timeout", o.RenewCallTimeout, base.c, fixed)
	t.AcquirePollInterval = pick("acquire_poll_interval", o.AcquirePollInterval, base.p, Derived)
	t.StepDownGrace = pick("step_down_grace", o.StepDownGrace, base.g, Profile)
	t.MaxRenewFails = DefaultMaxRenewFails
	t.Origins["max_renew_fails"] = Profile
	if o.MaxRenewFails != nil {
		t.MaxRenewFails = *o.MaxRenewFails
		t.Origins["max_renew_fails"] = Pinned
	}

	var c calc
	switch {
	case o.LeaseTTL == nil && o.RenewInterval == nil && mode == Clustered:
		t.LeaseTTL = pick("lease_ttl", nil, base.l, Profile)
		t.RenewInterval = pick("renew_interval", nil, base.r, Profile)
		t.RenewJitter = pick("lease_renew_jitter", o.RenewJitter, base.j, Profile)
	case o.RenewInterval == nil:
		t.LeaseTTL = pick("lease_ttl", o.LeaseTTL, base.l, Profile)
		// One round at its longest is lease_ttl/4; the renew interval and
		// half the jitter share what the call timeout leaves of it.
		round := t.LeaseTTL/RenewRoundsPerTTL - t.RenewCallTimeout
		if o.RenewJitter != nil {
			t.RenewJitter = pick("lease_renew_jitter", o.RenewJitter, 0, Pinned)
			t.RenewInterval = round - t.RenewJitter/2
		} else {
			// R + R/8 = round, so R = floor(round*8/9) and the jitter takes
			// the rest; written as round - ceil(round/9) so no 8*round
			// intermediate can overflow.
			t.RenewInterval = round - time.Duration(ceilDiv(int64(max(round, 0)), 9))
			t.RenewJitter = 2 * (round - t.RenewInterval)
			t.Origins["lease_renew_jitter"] = Derived
		}
		t.Origins["renew_interval"] = Derived
		if round <= 0 || t.RenewInterval <= 0 {
			return t, fmt.Errorf("%w: cannot derive renew_interval: lease_ttl/%d - renew_call_timeout - lease_renew_jitter/2 = %s/%d - %s - %s = %s, must be > 0",
				ErrDerivation, RenewRoundsPerTTL, FormatSeconds(t.LeaseTTL), RenewRoundsPerTTL,
				FormatSeconds(t.RenewCallTimeout), FormatSeconds(t.RenewJitter/2), FormatSeconds(t.RenewInterval))
		}
	default:
		t.RenewInterval = pick("renew_interval", o.RenewInterval, 0, Pinned)
		t.RenewJitter = pick("lease_renew_jitter", o.RenewJitter, t.RenewInterval/4, Derived)
		if o.LeaseTTL != nil {
			t.LeaseTTL = pick("lease_ttl", o.LeaseTTL, 0, Pinned)
		} else {
			round := c.sum("lease_ttl", t.RenewInterval, t.RenewJitter/2, t.RenewCallTimeout)
			t.LeaseTTL = c.mul("lease_ttl", round, RenewRoundsPerTTL)
			t.Origins["lease_ttl"] = Derived
		}
	}
	if c.err != nil {
		return t, c.err
	}
	return t, nil
}

// ErrDerivation reports pinned values from which no renew cadence follows.
var ErrDerivation = errors.New("admission: lease timing cannot be derived")
