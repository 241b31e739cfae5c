package fleetstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/lease"
)

// SnapshotFormat names the snapshot file's format.
const SnapshotFormat = "leasebridge-store-snapshot/1"

// The epoch raise of a restore: every session's epoch is raised by the
// larger of MinEpochRaise and EpochRatePerSecond for every second since
// the snapshot was taken, above both the snapshot's epoch and the store's.
// Epochs grow by one per takeover; no fleet takes over a million times a
// second, so no epoch stamped after the snapshot reaches the raised one.
const (
	MinEpochRaise      = uint64(1e9)
	EpochRatePerSecond = uint64(1e6)
)

// ErrSnapshot reports a snapshot file that cannot be restored.
var ErrSnapshot = errors.New("fleetstore: not a usable snapshot")

// Snapshot is the file `leasebridge store snapshot` writes: every key
// under the fleet's key prefix at one revision, with the time it was
// taken.
type Snapshot struct {
	Format    string    `json:"format"`
	TakenAt   time.Time `json:"taken_at"`
	Revision  int64     `json:"revision"`
	KeyPrefix string    `json:"key_prefix"`
	// Rows are the session rows, by session; other keys under the prefix
	// (node rows, handover and drain requests) are live state a restore
	// does not bring back.
	Rows map[string]lease.Row `json:"rows"`
}

// TakeSnapshot reads every session row under prefix in one linearizable
// read.
func (o *Ops) TakeSnapshot(ctx context.Context, prefix string, now time.Time) (Snapshot, error) {
	resp, err := o.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return Snapshot{}, fmt.Errorf("fleetstore: read %q: %w", prefix, err)
	}
	s := Snapshot{Format: SnapshotFormat, TakenAt: now.UTC(), Revision: resp.Header.Revision, KeyPrefix: prefix, Rows: map[string]lease.Row{}}
	for _, kv := range resp.Kvs {
		session := strings.TrimPrefix(string(kv.Key), prefix)
		if strings.Contains(session, "/") {
			continue // a fleet key, not a session row
		}
		var row lease.Row
		if err := json.Unmarshal(kv.Value, &row); err != nil {
			return Snapshot{}, fmt.Errorf("fleetstore: key %q is not a lease row: %w", kv.Key, err)
		}
		s.Rows[session] = row
	}
	return s, nil
}

// WriteSnapshot writes s as indented JSON.
func WriteSnapshot(w io.Writer, s Snapshot) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// ReadSnapshot reads and checks a snapshot file's content.
func ReadSnapshot(r io.Reader) (Snapshot, error) {
	var s Snapshot
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return Snapshot{}, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	if s.Format != SnapshotFormat || s.TakenAt.IsZero() {
		return Snapshot{}, fmt.Errorf("%w: format %q taken at %s: want %s with taken_at", ErrSnapshot, s.Format, s.TakenAt, SnapshotFormat)
	}
	return s, nil
}

// EpochRaise is how far a restore raises every epoch for a snapshot
// taken age ago: max(MinEpochRaise, EpochRatePerSecond x age in whole
// seconds, rounded up); a snapshot from the future counts as taken now.
func EpochRaise(age time.Duration) uint64 {
	if age <= 0 {
		return MinEpochRaise
	}
	secs := uint64((age + time.Second - 1) / time.Second)
	if secs > math.MaxUint64/EpochRatePerSecond {
		return math.MaxUint64
	}
	return max(MinEpochRaise, secs*EpochRatePerSecond)
}

// Restored is what Restore wrote.
type Restored struct {
	// Rows is how many session rows were written, each released.
	Rows int `json:"rows"`
	// Raise is how far every epoch was raised above the larger of the
	// snapshot's and the store's.
	Raise uint64 `json:"epoch_raise"`
	// MaxEpoch is the highest epoch written.
	MaxEpoch uint64 `json:"max_epoch"`
}

// Restore writes every session row of the snapshot and of the store
// released, with its epoch raised by EpochRaise(now - taken_at) above the
// larger of the two: the next owner of every session takes an epoch no
// owner has stamped, before the snapshot or after it. Each row is one
// compare-and-swap on the revision read, retried on a conflict (a running
// bridge renewing it), so a restore on a live fleet never lowers an epoch.
func (o *Ops) Restore(ctx context.Context, prefix string, s Snapshot, now time.Time) (Restored, error) {
	r := Restored{Raise: EpochRaise(now.Sub(s.TakenAt))}
	sessions := map[string]bool{}
	for k := range s.Rows {
		sessions[k] = true
	}
	resp, err := o.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return r, fmt.Errorf("fleetstore: read %q: %w", prefix, err)
	}
	for _, kv := range resp.Kvs {
		if k := strings.TrimPrefix(string(kv.Key), prefix); !strings.Contains(k, "/") {
			sessions[k] = true
		}
	}
	for session := range sessions {
		epoch, err := o.restoreRow(ctx, prefix+session, s.Rows[session].Epoch, r.Raise, now)
		if err != nil {
			return r, err
		}
		r.Rows++
		r.MaxEpoch = max(r.MaxEpoch, epoch)
	}
	return r, nil
}

// restoreRow writes one row released at max(snapshot, store) + raise.
func (o *Ops) restoreRow(ctx context.Context, key string, snapEpoch, raise uint64, now time.Time) (uint64, error) {
	for {
		resp, err := o.cli.Get(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("fleetstore: read %q: %w", key, err)
		}
		var cur lease.Row
		var rev int64
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if err := json.Unmarshal(resp.Kvs[0].Value, &cur); err != nil {
				return 0, fmt.Errorf("fleetstore: key %q is not a lease row: %w", key, err)
			}
		}
		base := max(cur.Epoch, snapEpoch)
		if base > math.MaxUint64-raise {
			return 0, fmt.Errorf("fleetstore: %q: epoch %d + raise %d overflows", key, base, raise)
		}
		row := lease.Row{Epoch: base + raise, RenewedAt: now.UnixNano()}
		val, err := json.Marshal(row)
		if err != nil {
			return 0, err
		}
		tr, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return 0, fmt.Errorf("fleetstore: write %q: %w", key, err)
		}
		if tr.Succeeded {
			return row.Epoch, nil
		}
	}
}
