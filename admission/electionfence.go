package admission

import (
	"fmt"
	"math"
	"time"
)

// MinElectionHeartbeats is the smallest election_timeout, in heartbeat
// intervals, that etcd accepts.
const MinElectionHeartbeats = 5

// ElectionRideThrough is how long after sending its last successful renew
// an owner may need to land the next one when the store elects a leader
// for up to e: E + 4*C + 2*R + J. Its last success was sent up to C +
// R + J/2 before the election began (it took C, and the next renew was
// due just as the store stopped); the call in flight when the store comes
// back may fail a full C later, the ownership read the failure streak
// asks for takes another, and after one more renew round (R + J/2 and the
// renew, C) the renew lands. A renew that landed without its response
// costs one more round, which the later deadline it then moves to pays
// back but for the jitter's spread, and J covers that. The owner keeps
// serving through the election only if this is at most FenceAfter.
func ElectionRideThrough(t Timing, e time.Duration) (time.Duration, error) {
	var c calc
	d := c.sum("election_ride_through", e, c.mul("election_ride_through", t.RenewCallTimeout, 4),
		c.mul("election_ride_through", t.RenewInterval, 2), t.RenewJitter)
	return d, c.err
}

// checkElectionFence sets r.StoreElection and warns when an election of
// the fleet's own store can make a healthy owner fence itself: its
// renews fail while there is no leader, and the election can outlast what
// its fence deadline tolerates. The warning gives the lease_ttl and the
// election_timeout that avoid it.
func checkElectionFence(r *Report, in Inputs, refuse func(string, ...any)) {
	if in.Store == nil || in.Store.ElectionTimeout <= 0 || in.Store.HeartbeatInterval <= 0 {
		return
	}
	e, err := StoreElection(*in.Store)
	if err != nil {
		refuse("%v", err)
		return
	}
	r.StoreElection = e
	t, fs := r.Timing, FormatSeconds
	need, err := ElectionRideThrough(t, e)
	if err != nil {
		refuse("%v", err)
		return
	}
	if need <= r.FenceAfter {
		return
	}
	fix := fmt.Sprintf("no lease_ttl avoids it at this renew_call_timeout %s", fs(t.RenewCallTimeout))
	if l, ok := LeaseTTLForElection(t, r.CloseBound, e); ok {
		fix = "set lease_ttl >= " + fs(l)
		if t.Origins["renew_interval"] != Pinned {
			fix += " (renew_interval and lease_renew_jitter derived from it)"
		}
	}
	if et, ok := ElectionTimeoutFor(t, r.FenceAfter, in.Store.HeartbeatInterval); ok {
		fix += " or lease_store.election_timeout <= " + fs(et)
	} else {
		fix += fmt.Sprintf("; no election_timeout of at least %d heartbeat_interval does", MinElectionHeartbeats)
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf(
		"store election: the owner's renews fail while the fleet's store elects a leader, for up to E = 4*election_timeout + 3*heartbeat_interval + %s = %s; it keeps serving only if E + 4*renew_call_timeout + 2*renew_interval + lease_renew_jitter = %s + %s + %s + %s = %s <= fence_after = %s (lease_ttl %s - close bound %s - clock-rate margin %s), so an election can fence a healthy owner and stop its session until it takes its row back: %s",
		fs(StoreDiskAllowance), fs(e), fs(e), fs(4*t.RenewCallTimeout), fs(2*t.RenewInterval), fs(t.RenewJitter), fs(need),
		fs(r.FenceAfter), fs(t.LeaseTTL), fs(r.CloseBound), fs(ClockRateMargin(t.LeaseTTL)), fix))
}

// ridesThrough reports whether an owner at t, with transports closing
// within closeBound, rides through an election of e.
func ridesThrough(t Timing, closeBound, e time.Duration) bool {
	need, err := ElectionRideThrough(t, e)
	if err != nil {
		return false
	}
	var c calc
	fenceAfter := t.LeaseTTL - ClockRateMargin(t.LeaseTTL)
	budget := c.add("fence_after", fenceAfter, -closeBound)
	return c.err == nil && need <= budget
}

// LeaseTTLForElection is the smallest lease_ttl, in whole milliseconds,
// at which an owner rides through an election of e when the file sets it:
// the renew cadence is derived from it unless renew_interval is pinned
// (ResolveTiming), and every other value stays as resolved in t. ok is
// false when none fits in int64 nanoseconds.
func LeaseTTLForElection(t Timing, closeBound, e time.Duration) (time.Duration, bool) {
	at := func(ms int64) (Timing, bool) {
		l := time.Duration(ms) * time.Millisecond
		o := Overrides{LeaseTTL: &l, RenewCallTimeout: &t.RenewCallTimeout, AcquirePollInterval: &t.AcquirePollInterval,
			StepDownGrace: &t.StepDownGrace, MaxRenewFails: &t.MaxRenewFails}
		if t.Origins["renew_interval"] == Pinned {
			o.RenewInterval = &t.RenewInterval
		}
		if t.Origins["lease_renew_jitter"] == Pinned {
			o.RenewJitter = &t.RenewJitter
		}
		// With lease_ttl pinned the mode picks nothing.
		nt, err := ResolveTiming(Clustered, o)
		return nt, err == nil && ridesThrough(nt, closeBound, e)
	}
	// The slack grows with lease_ttl (a derived renew round takes a
	// quarter of it), so the smallest fitting value is found by doubling
	// and then bisecting.
	lo, hi := int64(0), max(int64(1), int64(t.LeaseTTL/time.Millisecond))
	for {
		if _, ok := at(hi); ok {
			break
		}
		if hi > math.MaxInt64/int64(time.Millisecond)/2 {
			return 0, false
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, ok := at(mid); ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Duration(hi) * time.Millisecond, true
}

// ElectionTimeoutFor is the largest election_timeout, in whole
// milliseconds, at which an owner at t with fenceAfter rides through the
// store's elections at heartbeat hb; ok is false when it would be below
// the MinElectionHeartbeats etcd requires.
func ElectionTimeoutFor(t Timing, fenceAfter, hb time.Duration) (time.Duration, bool) {
	var c calc
	rest, err := ElectionRideThrough(t, 0)
	if err != nil {
		return 0, false
	}
	fixed := c.sum("election_timeout", rest, c.mul("election_timeout", hb, StoreRoundTrips), StoreDiskAllowance)
	if c.err != nil || fixed > fenceAfter {
		return 0, false
	}
	et := ((fenceAfter - fixed) / (2 * StoreCampaigns)).Truncate(time.Millisecond)
	floor := c.mul("election_timeout", hb, MinElectionHeartbeats)
	if c.err != nil || et < floor || et <= 0 {
		return 0, false
	}
	return et, true
}
