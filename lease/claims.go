package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Claim is the value of an endpoint claim row: which fleet (key_prefix),
// session, node and owner hold a device endpoint. Claims only detect two
// fleets sharing a device; the lease row stays the safety mechanism.
type Claim struct {
	KeyPrefix string `json:"key_prefix"`
	Session   string `json:"session"`
	Node      string `json:"node"`
	Owner     string `json:"owner"`
	// TakesOver, when set, narrows the takeover of a live claim of the
	// same key_prefix and session to one held by this owner (or by
	// Owner): a planned handover's target claims ahead of its takeover
	// only what the previous owner held. It is not stored.
	TakesOver string `json:"-"`
}

// Claimer records endpoint claims in the lease store, in a key space no
// key_prefix changes, so fleets with different prefixes see each other's.
type Claimer interface {
	// Claim holds every endpoint for c, all or none, until release is
	// called or the store has not heard from the process for ttl. A
	// live claim of another key_prefix or session on any endpoint fails
	// it with a *ClaimConflict; one of the same key_prefix and session
	// (a previous owner's) is taken over.
	Claim(ctx context.Context, endpoints []string, c Claim, ttl time.Duration) (release func(context.Context) error, err error)
}

// ErrClaimed reports an endpoint claimed by another fleet or session.
var ErrClaimed = errors.New("lease: endpoint claimed by another fleet or session")

// ClaimConflict is a live claim on an endpoint by another key_prefix or
// session.
type ClaimConflict struct {
	// Endpoint is the endpoint identity claimed.
	Endpoint string
	// Holder is the claim that holds it.
	Holder Claim
}

// Error names the endpoint and its holder.
func (e *ClaimConflict) Error() string {
	return fmt.Sprintf("%v: %s is held by key_prefix %q session %q (node %s, owner %s)",
		ErrClaimed, e.Endpoint, e.Holder.KeyPrefix, e.Holder.Session, e.Holder.Node, e.Holder.Owner)
}

// Unwrap makes errors.Is(err, ErrClaimed) hold.
func (e *ClaimConflict) Unwrap() error { return ErrClaimed }

// Conflicts reports whether a claim held by other keeps c from an
// endpoint: only the same key_prefix and session may take it over (with
// TakesOver, only from that owner or c's own).
func (c Claim) Conflicts(other Claim) bool {
	if c.KeyPrefix != other.KeyPrefix || c.Session != other.Session {
		return true
	}
	return c.TakesOver != "" && other.Owner != c.TakesOver && other.Owner != c.Owner
}
