package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/lease"
)

// Fleet rows live under key_prefix, in key spaces a session key can never
// name: a session id has no slash, and every fleet key has one after its
// first segment (docs/lease-protocol.md, fleet rows).
const (
	// NodesSpace holds one membership row per node: <key_prefix>_nodes/<node>.
	NodesSpace = "_nodes/"
	// HandoverSpace holds handover requests: <key_prefix>_ctl/handover/<session>.
	HandoverSpace = "_ctl/handover/"
	// DrainSpace holds drain requests: <key_prefix>_ctl/drain/<node>.
	DrainSpace   = "_ctl/drain/"
	controlSpace = "_ctl/"
)

// revisionTimeout bounds the read that starts a watch when the store has
// no CallTimeout: a watch set up while the store is down starts late.
const revisionTimeout = 2 * time.Second

var _ lease.Fleet = (*Store)(nil)

// PutNode implements lease.Fleet.
func (s *Store) PutNode(ctx context.Context, n lease.NodeRow) error {
	return s.putJSON(ctx, s.prefix+NodesSpace+n.Node, n, 0)
}

func (s *Store) putJSON(ctx context.Context, k string, v any, ttl time.Duration) error {
	val, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("etcdstore: encode %q: %w", k, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if ttl > 0 {
		// The etcd lease only collects a request nobody cleared; no
		// ownership decision waits for it.
		g, err := s.grant(ctx, ttl)
		if err != nil {
			return fmt.Errorf("%w: grant a %s lease for %q: %w", lease.ErrUnavailable, ttl, k, err)
		}
		opts = append(opts, clientv3.WithLease(g.ID))
	}
	if _, err := s.cli.Put(ctx, k, string(val), opts...); err != nil {
		return fmt.Errorf("%w: write %q: %w", lease.ErrUnavailable, k, err)
	}
	return nil
}

// rangeOf reads every key under space and decodes each value with dec,
// which gets the key's remainder after the space.
func (s *Store) rangeOf(ctx context.Context, space string, dec func(name string, val []byte) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	p := s.prefix + space
	resp, err := s.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("%w: read %q: %w", lease.ErrUnavailable, p, err)
	}
	for _, kv := range resp.Kvs {
		if err := dec(strings.TrimPrefix(string(kv.Key), p), kv.Value); err != nil {
			return fmt.Errorf("etcdstore: key %q holds %q: %w", kv.Key, kv.Value, err)
		}
	}
	return nil
}

// Nodes implements lease.Fleet.
func (s *Store) Nodes(ctx context.Context) (map[string]lease.NodeRow, error) {
	out := map[string]lease.NodeRow{}
	err := s.rangeOf(ctx, NodesSpace, func(name string, val []byte) error {
		var n lease.NodeRow
		if err := json.Unmarshal(val, &n); err != nil {
			return err
		}
		out[name] = n
		return nil
	})
	return out, err
}

// rowsPerTxn keeps a bulk read under etcd's default limit of 128
// operations per transaction (--max-txn-ops).
const rowsPerTxn = 100

// Rows implements lease.Fleet with linearizable transactions of at most
// rowsPerTxn reads each.
func (s *Store) Rows(ctx context.Context, keys []string) (map[string]lease.VersionedRow, error) {
	out := make(map[string]lease.VersionedRow, len(keys))
	for chunk := range slices.Chunk(keys, rowsPerTxn) {
		if err := s.rowsTxn(ctx, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) rowsTxn(ctx context.Context, keys []string, out map[string]lease.VersionedRow) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(s.prefix + k)
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("%w: read the rows of %d sessions from %q: %w", lease.ErrUnavailable, len(keys), keys[0], err)
	}
	for i, r := range resp.Responses {
		var vr lease.VersionedRow
		if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
			row, err := decodeRow(kvs[0])
			if err != nil {
				return err
			}
			vr = lease.VersionedRow{Row: row, Version: kvs[0].ModRevision}
		}
		out[keys[i]] = vr
	}
	return nil
}

// Control implements lease.Fleet.
func (s *Store) Control(ctx context.Context) (lease.Control, error) {
	c := lease.Control{Handovers: map[string]lease.HandoverRequest{}, Draining: map[string]bool{}}
	err := s.rangeOf(ctx, controlSpace, func(name string, val []byte) error {
		switch {
		case strings.HasPrefix(controlSpace+name, HandoverSpace):
			var h lease.HandoverRequest
			if err := json.Unmarshal(val, &h); err != nil {
				return err
			}
			c.Handovers[strings.TrimPrefix(controlSpace+name, HandoverSpace)] = h
		case strings.HasPrefix(controlSpace+name, DrainSpace):
			c.Draining[strings.TrimPrefix(controlSpace+name, DrainSpace)] = true
		}
		return nil
	})
	return c, err
}

// RequestHandover implements lease.Fleet.
func (s *Store) RequestHandover(ctx context.Context, h lease.HandoverRequest, ttl time.Duration) error {
	return s.putJSON(ctx, s.prefix+HandoverSpace+h.Session, h, ttl)
}

// ClearHandover implements lease.Fleet: it deletes the request only while
// it still names epoch, so a newer request survives.
func (s *Store) ClearHandover(ctx context.Context, session string, epoch uint64) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k := s.prefix + HandoverSpace + session
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return fmt.Errorf("%w: read %q: %w", lease.ErrUnavailable, k, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	var h lease.HandoverRequest
	if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil || h.Epoch != epoch {
		return nil // gone or another request: not ours to clear
	}
	_, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return fmt.Errorf("%w: delete %q: %w", lease.ErrUnavailable, k, err)
	}
	return nil
}

// SetDrain implements lease.Fleet.
func (s *Store) SetDrain(ctx context.Context, node string, draining bool) error {
	k := s.prefix + DrainSpace + node
	if draining {
		return s.putJSON(ctx, k, map[string]any{"node": node, "requested_at_unix_ns": time.Now().UnixNano()}, 0)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.cli.Delete(ctx, k); err != nil {
		return fmt.Errorf("%w: delete %q: %w", lease.ErrUnavailable, k, err)
	}
	return nil
}

// WatchControl implements lease.Fleet.
func (s *Store) WatchControl(ctx context.Context) <-chan struct{} {
	return s.watch(ctx, s.prefix+controlSpace, clientv3.WithPrefix())
}

// WatchRow implements lease.Fleet.
func (s *Store) WatchRow(ctx context.Context, key string) <-chan struct{} {
	return s.watch(ctx, s.prefix+key)
}

// WatchRowValues implements lease.RowWatcher.
func (s *Store) WatchRowValues(ctx context.Context, key string) <-chan lease.VersionedRow {
	out := make(chan lease.VersionedRow, 1)
	// The watch's goroutine is the only sender: once an older row nobody
	// read is dropped, the send cannot block.
	send := func(r lease.VersionedRow) {
		select {
		case <-out:
		default:
		}
		out <- r
	}
	s.watchEach(ctx, s.prefix+key, func(evs []*clientv3.Event) {
		last := evs[len(evs)-1]
		if last.Type != clientv3.EventTypePut {
			return
		}
		if row, err := decodeRow(last.Kv); err == nil {
			send(lease.VersionedRow{Row: row, Version: last.Kv.ModRevision})
		}
	}, nil, func() { close(out) })
	return out
}

// watch signals every change of k, coalesced, from the store's revision
// when it returns: it reads that revision first, so no change after the
// call is missed. A broken watch is started again and signals once, since
// changes may have been missed meanwhile.
func (s *Store) watch(ctx context.Context, k string, opts ...clientv3.OpOption) <-chan struct{} {
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	s.watchEach(ctx, k, func([]*clientv3.Event) { signal() }, signal, func() { close(out) }, opts...)
	return out
}

// watchEach calls each with every watch response's events on k, from the
// store's revision when it returns, until ctx ends, then done. A broken
// watch is started again, after calling broken (if not nil): changes may
// have been missed meanwhile.
func (s *Store) watchEach(ctx context.Context, k string, each func([]*clientv3.Event), broken, done func(), opts ...clientv3.OpOption) {
	rev := s.revision(ctx, k)
	go func() {
		defer done()
		for ctx.Err() == nil {
			wopts := opts
			if rev > 0 {
				wopts = append(slices.Clip(opts), clientv3.WithRev(rev+1))
			}
			for resp := range s.cli.Watch(clientv3.WithRequireLeader(ctx), k, wopts...) {
				if resp.Err() != nil {
					break
				}
				if len(resp.Events) > 0 {
					each(resp.Events)
				}
			}
			if broken != nil {
				broken()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			rev = s.revision(ctx, k)
		}
	}()
}

// revision is the store's current revision, or 0 when it cannot be read
// (the watch then starts from whenever it is set up).
func (s *Store) revision(ctx context.Context, k string) int64 {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.timeout, revisionTimeout))
	defer cancel()
	resp, err := s.cli.Get(ctx, k, clientv3.WithCountOnly())
	if err != nil {
		return 0
	}
	return resp.Header.Revision
}
