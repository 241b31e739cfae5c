// Package lease implements leasebridge's lease protocol: one row per
// session in a shared store, taken over by observation rather than by the
// store's own TTL, guarded by compare-and-swap on the row's version, and
// held by an owner that fences itself before any standby could take over.
//
// The protocol lives in Core, a pure state machine that is given the time
// and the results of store calls and answers with the next call to make or
// the instant to wake up. Manager is the thin run loop that drives a Core
// against a Store with real clocks and hands the owner a context that ends
// at the self-fence deadline. RowSource lets the standbys of one process
// share one bulk read per poll. docs/lease-protocol.md explains why the
// fence makes two owners impossible.
package lease

import (
	"context"
	"errors"
	"time"
)

// Row is the value of a session's lease row.
type Row struct {
	// Owner is the identity of the holder: node name plus a suffix new at
	// every process start. Empty means released.
	Owner string `json:"owner"`
	// Node is the holder's node name, for operators.
	Node string `json:"node"`
	// Epoch increases with every takeover; it is the fencing token stamped
	// on everything the owner publishes.
	Epoch uint64 `json:"epoch"`
	// Timing is the cadence of the owner that wrote the row. A standby
	// waits for the longer of its own lease_ttl and this one before it
	// takes the row over. A released row, or one written by a binary
	// older than this field, carries none (the zero value).
	Timing RowTiming `json:"timing,omitzero"`
	// RenewedAt is the writer's wall clock at the write, Unix nanoseconds,
	// stamped by the store; for the age `leasebridge status` prints only:
	// the protocol never reads it (takeover is judged by observation).
	RenewedAt int64 `json:"renewed_at_unix_ns,omitempty"`
	// Release, in a released row, says why and since when its last owner
	// gave it up, so the successor can measure the whole outage; nil when
	// the owner said nothing (or the row is owned).
	Release *Release `json:"release,omitempty"`
}

// RowTiming is the cadence an owner writes into its row, in integer
// nanoseconds: LeaseTTL is what a standby needs to take over safely;
// the rest tells an operator how the owner runs.
type RowTiming struct {
	LeaseTTL            time.Duration `json:"lease_ttl_ns"`
	RenewInterval       time.Duration `json:"renew_interval_ns"`
	RenewCallTimeout    time.Duration `json:"renew_call_timeout_ns"`
	AcquirePollInterval time.Duration `json:"acquire_poll_interval_ns"`
	FenceAfter          time.Duration `json:"fence_after_ns"`
}

// Release is why an owner gave its row up.
type Release struct {
	// Cause is broker_path, device_path or handover.
	Cause string `json:"cause"`
	// AtUnixNS is the wall-clock instant the outage began for the old
	// owner: when its broker path or device was lost, or when its planned
	// release started.
	AtUnixNS int64 `json:"at_unix_ns"`
}

// ReleaseCauseHandover is the Release.Cause of a planned handover or an
// orderly stop; a deferring standby (Core.Defer) defers the row it frees.
const ReleaseCauseHandover = "handover"

// Store is the lease store as the manager needs it. Versions are opaque,
// strictly increasing per key; 0 means the row does not exist.
//
// Every method is bounded by ctx. An error other than ErrConflict from a
// write means the write may or may not have landed; the manager resolves
// that with ReadAuthoritative.
type Store interface {
	// Read returns the row at key and its version; a missing row is a
	// zero Row and version 0.
	Read(ctx context.Context, key string) (Row, int64, error)
	// CompareAndSwap writes row at key if the key's version is still
	// expect (0: the row must not exist) and returns the new version. It
	// returns an error wrapping ErrConflict when the version differed and
	// nothing was written.
	CompareAndSwap(ctx context.Context, key string, expect int64, row Row) (int64, error)
	// ReadAuthoritative is a linearizable read: it reflects every write
	// that landed before it was issued, including writes whose responses
	// were lost.
	ReadAuthoritative(ctx context.Context, key string) (Row, int64, error)
	// Release writes row, whose owner is empty and whose epoch is kept, if
	// the key's version is still expect; ErrConflict as for CompareAndSwap.
	Release(ctx context.Context, key string, expect int64, row Row) error
}

// Pinger is a Store that can tell whether it is reachable with one cheap
// linearizable call, without reading any session's row.
type Pinger interface {
	// Ping returns nil when the store answered a linearizable request
	// within ctx.
	Ping(ctx context.Context) error
}

// Sentinel errors.
var (
	// ErrConflict reports a compare-and-swap whose expected version no
	// longer matched; nothing was written.
	ErrConflict = errors.New("lease: version conflict")
	// ErrUnavailable reports a store that could not be reached.
	ErrUnavailable = errors.New("lease: store unavailable")
	// ErrInvalidConfig reports a manager configuration that cannot be run.
	ErrInvalidConfig = errors.New("lease: invalid config")
	// ErrFenced is the cause of an owner context cancelled at the
	// self-fence deadline.
	ErrFenced = errors.New("lease: self-fence deadline reached")
	// ErrLost is the cause of an owner context cancelled because another
	// owner holds the row.
	ErrLost = errors.New("lease: ownership lost")
	// ErrReleased is the cause of an owner context cancelled for release.
	ErrReleased = errors.New("lease: released")
	// ErrStopped reports a manager that is no longer running.
	ErrStopped = errors.New("lease: manager stopped")
)

// PrefixReader reads many rows in one call. A RowSource uses it so that
// the standbys of one process cost one store read per poll, not one per
// session.
type PrefixReader interface {
	// ReadPrefix returns every row whose key starts with prefix, keyed by
	// key (the session id, as Store's methods take it), in one
	// linearizable read: it reflects every write that landed before it
	// was issued. Each key's Result is what a Read of it would give: the
	// row and its version, or Err when the key's value is not a lease
	// row. A missing key is a row that does not exist.
	ReadPrefix(ctx context.Context, prefix string) (map[string]Result, error)
}

// Swap is one row of a batched compare-and-swap: write Row at Key if the
// key's version is still Expect.
type Swap struct {
	Key    string
	Expect int64
	Row    Row
}

// BatchSwapper is a Store that can compare-and-swap many rows in one call.
// A Renewer uses it so that an owner renews every row it holds in a few
// store requests, not one per session. A store that cannot batch (one
// whose API has no multi-object compare-and-swap) does not implement it,
// and its owners keep renewing one row per call.
type BatchSwapper interface {
	// CompareAndSwapBatch applies every swap, each on its own compare: one
	// swap's conflict does not stop the others. It returns one Result per
	// swap, in order: the new version; an Err wrapping ErrConflict when
	// that row's version differed and nothing was written to it; or any
	// other Err when the request that carried the swap failed, so that it
	// may or may not have landed, as with a failed CompareAndSwap. A store
	// may split the swaps over several requests (etcd's limit on
	// operations per transaction). An error for the whole call means the
	// outcome of every swap is unknown.
	CompareAndSwapBatch(ctx context.Context, swaps []Swap) ([]Result, error)
}
