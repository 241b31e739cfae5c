package lease

import (
	"context"
	"time"
)

// NodeRow is a node's membership row (docs/lease-protocol.md, fleet
// rows): who the node is, what it can serve and how it is doing. The node
// rewrites it every Interval; a reader judges it live while it has changed
// within TTL (RenewedAt on the writer's wall clock, so only for display:
// no ownership decision depends on it).
type NodeRow struct {
	// Node is the node name.
	Node string `json:"node"`
	// Owner is the process identity (node name plus a per-start suffix).
	Owner string `json:"owner"`
	// Sessions are the sessions of the node's configuration it is eligible
	// for, sorted: the ones it runs a lease manager for.
	Sessions []string `json:"sessions"`
	// Owned are the sessions the node owns, sorted.
	Owned []string `json:"owned"`
	// Serving are the owned sessions at ServiceLevelFull, sorted.
	Serving []string `json:"serving"`
	// Draining is set while a drain request for the node stands.
	Draining bool `json:"draining"`
	// Stopped is set by the process's last write at a clean stop, after
	// its lease managers stopped and released what the store let them (a
	// row it could not release lapses): the node is down, not late.
	Stopped bool `json:"stopped,omitempty"`
	// Interval is how often the node rewrites the row; TTL is how long a
	// reader waits for a change before it calls the node down.
	Interval time.Duration `json:"interval_ns"`
	TTL      time.Duration `json:"ttl_ns"`
	// RenewedAt is the writer's wall clock at the write, Unix nanoseconds.
	RenewedAt int64 `json:"renewed_at_unix_ns"`
}

// HandoverRequest asks the owner of Session at Epoch to hand it over,
// to node To or, when To is empty, to any other eligible node.
type HandoverRequest struct {
	Session string `json:"session"`
	// Epoch is the row's epoch when the request was made: an owner at
	// another epoch ignores the request, so it acts at most once.
	Epoch uint64 `json:"epoch"`
	// Owner is the row's owner identity when the request was made.
	Owner string `json:"owner"`
	To    string `json:"to,omitempty"`
	// RequestedAt is the requester's wall clock, Unix nanoseconds.
	RequestedAt int64 `json:"requested_at_unix_ns"`
}

// Control is every standing control request of a fleet.
type Control struct {
	// Handovers by session.
	Handovers map[string]HandoverRequest
	// Draining is the set of nodes asked to drain.
	Draining map[string]bool
}

// VersionedRow is a session row with its version; Version 0: no row.
type VersionedRow struct {
	Row     Row
	Version int64
}

// Fleet is the lease store's fleet view: membership rows, control
// requests (handover, drain) and change notifications. Every write that
// changes ownership goes through it, and so through the store's
// authentication, never through an unauthenticated endpoint.
type Fleet interface {
	// PutNode writes n's membership row.
	PutNode(ctx context.Context, n NodeRow) error
	// Nodes reads every membership row, by node name.
	Nodes(ctx context.Context) (map[string]NodeRow, error)
	// Rows reads the session rows of keys.
	Rows(ctx context.Context, keys []string) (map[string]VersionedRow, error)
	// Control reads every standing control request.
	Control(ctx context.Context) (Control, error)
	// RequestHandover writes h; it lapses after ttl if nobody clears it.
	RequestHandover(ctx context.Context, h HandoverRequest, ttl time.Duration) error
	// ClearHandover deletes the handover request of session if it is
	// still the one for epoch.
	ClearHandover(ctx context.Context, session string, epoch uint64) error
	// SetDrain writes (draining) or deletes the drain request of node.
	SetDrain(ctx context.Context, node string, draining bool) error
	// WatchControl signals, coalesced, every change of the control
	// requests until ctx ends; the channel closes when ctx ends.
	WatchControl(ctx context.Context) <-chan struct{}
	// WatchRow signals, coalesced, every change of the session row at key
	// until ctx ends; the channel closes when ctx ends.
	WatchRow(ctx context.Context, key string) <-chan struct{}
}

// RowWatcher is a store that delivers the rows it watches, not only
// their changes: a planned handover's target hands the released row to
// its manager (Manager.Offer) without reading it again.
type RowWatcher interface {
	// WatchRowValues sends the session row at key, with its version, at
	// each change, the latest undelivered one winning, until ctx ends; the
	// channel then closes. A deleted row or one that does not decode is
	// not sent; a broken watch is started again and may miss changes, so
	// a caller keeps a fallback poll.
	WatchRowValues(ctx context.Context, key string) <-chan VersionedRow
}
