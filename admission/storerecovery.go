package admission

import "time"

// Store is the raft timing of a lease store the fleet runs itself
// (lease_store.members). Inputs.Store is nil when the store runs elsewhere:
// a node's death then cannot take the store's leader with it, and the
// owner-death budget has no store_recovery term.
type Store struct {
	// HeartbeatInterval is the members' heartbeat_interval, taken as the
	// bound of one round trip between members (etcd's tuning rule).
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
	// ElectionTimeout is the members' election_timeout.
	ElectionTimeout time.Duration `json:"election_timeout_ns"`
}

// StoreDiskAllowance is what the store election bound allows for the
// write-ahead-log syncs on its critical path: a vote is persisted before
// it is granted, the new leader's first entry before it is acknowledged.
// Each takes milliseconds on an SSD and can take a hundred on the SD cards
// and eMMC of small gateways.
const StoreDiskAllowance = 500 * time.Millisecond

// StoreCampaigns is how many campaigns the store election bound charges:
// the first may fail (two followers campaign within a round trip of each
// other and split the vote, or one campaigns while the other still holds
// the dead leader's lease), and each member then draws a new randomized
// timeout. A second failure in a row is outside the bound.
const StoreCampaigns = 2

// StoreRoundTrips is how many member round trips the winning campaign
// needs before the store serves again: the pre-vote, the vote, and the
// new leader's first entry, which must commit before it answers reads.
const StoreRoundTrips = 3

// StoreElection is E, how long after its leader dies the store can go
// without serving: StoreCampaigns campaigns, each started at most two
// election timeouts after the member last heard from a leader (raft
// randomizes the timeout in [election_timeout, 2*election_timeout)), the
// round trips of the winning one, and the disk allowance:
// E = 4*election_timeout + 3*heartbeat_interval + 500ms.
func StoreElection(s Store) (time.Duration, error) {
	var c calc
	e := c.sum("store_election",
		c.mul("store_election", s.ElectionTimeout, 2*StoreCampaigns),
		c.mul("store_election", s.HeartbeatInterval, StoreRoundTrips),
		StoreDiskAllowance)
	return e, c.err
}

// observationCalls is (1 + ceil(L/mjp))*C, the owner-death budget's
// observation_calls term.
func observationCalls(c *calc, t Timing) time.Duration {
	return c.mul("observation_calls", t.RenewCallTimeout, observationRounds(t))
}

// observationRounds is 1 + ceil(L/mjp), the renew_call_timeout count of
// observation_calls.
func observationRounds(t Timing) int64 {
	rounds := int64(1)
	if t.LeaseTTL > 0 {
		rounds += ceilDiv(int64(t.LeaseTTL), int64(MinJitteredPoll(t.AcquirePollInterval)))
	}
	return rounds
}

// StoreRecovery is the owner-death budget's store_recovery term when the
// dead owner's node also ran the store's leader:
// max(0, E + 3*C - (1 + ceil(L/mjp))*C).
//
// A standby measures lease_ttl on its own clock from the response that
// showed it the owner's last revision, so the calls it makes while it
// waits fall inside lease_ttl: a takeover with a healthy store spends two
// calls beyond L and the poll boundaries (the baseline call and the
// crossing call, which carries the compare-and-swap), and the budget
// charges 1 + ceil(L/mjp). During the election the standby cannot read
// the last revision; the call in flight when the store comes back may
// still fail a full C later, then the baseline call and the crossing call
// follow: E + 3*C beyond L and the poll boundaries. The term is what the
// observation calls charged do not already cover.
func StoreRecovery(t Timing, s Store) (time.Duration, error) {
	e, err := StoreElection(s)
	if err != nil {
		return 0, err
	}
	var c calc
	charged := observationCalls(&c, t)
	if c.err != nil {
		return 0, c.err
	}
	// E - charged first: both are non-negative, so it cannot overflow,
	// and adding C three times then overflows only if the result does.
	d := e - charged
	for range 3 {
		d = c.add("store_recovery", d, t.RenewCallTimeout)
	}
	if c.err != nil {
		return 0, c.err
	}
	return max(0, d), nil
}

// checkStore refuses store timing no election bound follows from.
func checkStore(s *Store, refuse func(string, ...any)) {
	if s == nil {
		return
	}
	if s.HeartbeatInterval <= 0 {
		refuse("lease_store.heartbeat_interval = %s: must be > 0", FormatSeconds(s.HeartbeatInterval))
	}
	if s.ElectionTimeout <= 0 {
		refuse("lease_store.election_timeout = %s: must be > 0", FormatSeconds(s.ElectionTimeout))
	}
}
