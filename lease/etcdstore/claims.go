package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/lease"
)

// ClaimPrefix is the key space of endpoint claims. It does not depend on
// key_prefix: fleets with different prefixes must see each other's claims.
const ClaimPrefix = "/leasebridge/endpoints/"

// ClaimKey is the claim row of an endpoint identity.
func ClaimKey(endpoint string) string { return ClaimPrefix + url.PathEscape(endpoint) }

var _ lease.Claimer = (*Store)(nil)

// claimAttempts bounds how often Claim retries after another writer
// changed a claim row between its read and its write.
const claimAttempts = 4

// Claim implements lease.Claimer. The rows are attached to an etcd lease
// of ttl (whole seconds, at least 1) that the store keeps alive until it
// is closed and shares among its claims of that ttl, so a claim is one
// transaction, not a grant and a put: it lies on a takeover's activation
// path. Release deletes the rows this call wrote, in one transaction; a
// row another owner of the session has taken over since is that owner's
// and stays. A process that dies stops keeping the lease alive, and its
// claims lapse with it.
func (s *Store) Claim(ctx context.Context, endpoints []string, c lease.Claim, ttl time.Duration) (func(context.Context) error, error) {
	if len(endpoints) == 0 {
		return func(context.Context) error { return nil }, nil
	}
	val, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: encode claim %+v: %w", c, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var rev int64
	for fresh := false; ; fresh = true {
		id, err := s.claimLeaseOf(ctx, ttl, fresh)
		if err != nil {
			return nil, fmt.Errorf("%w: grant a %s lease for the claims of %v: %w", lease.ErrUnavailable, ttl, endpoints, err)
		}
		rev, err = s.putClaims(ctx, endpoints, c, string(val), id)
		var conflict *lease.ClaimConflict
		if err == nil {
			break
		}
		// A shared lease that lapsed (the store did not hear from the
		// process for ttl) refuses the put: once more with a new one.
		if errors.As(err, &conflict) || fresh || ctx.Err() != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) error {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		ops := make([]clientv3.Op, len(endpoints))
		for i, ep := range endpoints {
			k := ClaimKey(ep)
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", rev)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("%w: delete the claims of %v (they lapse %s after the process stops): %w", lease.ErrUnavailable, endpoints, ttl, err)
		}
		return nil
	}, nil
}

// claimLease is an etcd lease the store keeps alive for its claims.
type claimLease struct {
	id   clientv3.LeaseID
	stop context.CancelFunc
}

// claimLeaseOf returns the store's claim lease of ttl, granting it (and
// starting its keep-alive) when there is none yet or fresh is true.
func (s *Store) claimLeaseOf(ctx context.Context, ttl time.Duration, fresh bool) (clientv3.LeaseID, error) {
	secs := leaseSecs(ttl)
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.leases == nil {
		s.leases = map[int64]*claimLease{}
	}
	if l := s.leases[secs]; l != nil && !fresh {
		return l.id, nil
	}
	g, err := s.grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	if old := s.leases[secs]; old != nil {
		old.stop()
	}
	kctx, stop := context.WithCancel(context.Background())
	s.leases[secs] = &claimLease{id: g.ID, stop: stop}
	go s.keepAlive(kctx, g.ID)
	return g.ID, nil
}

// putClaims writes every claim row in one transaction, compared against
// the rows as last read: absent, or held by the same key_prefix and
// session. It returns the rows' revision.
func (s *Store) putClaims(ctx context.Context, endpoints []string, c lease.Claim, val string, id clientv3.LeaseID) (int64, error) {
	seen := make([]int64, len(endpoints)) // ModRevision; 0: absent
	for range claimAttempts {
		cmps := make([]clientv3.Cmp, len(endpoints))
		puts := make([]clientv3.Op, len(endpoints))
		gets := make([]clientv3.Op, len(endpoints))
		for i, ep := range endpoints {
			k := ClaimKey(ep)
			cmps[i] = clientv3.Compare(clientv3.ModRevision(k), "=", seen[i])
			puts[i] = clientv3.OpPut(k, val, clientv3.WithLease(id))
			gets[i] = clientv3.OpGet(k)
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
		if err != nil {
			return 0, fmt.Errorf("%w: claim %v: %w", lease.ErrUnavailable, endpoints, err)
		}
		if resp.Succeeded {
			return resp.Header.Revision, nil
		}
		for i, r := range resp.Responses {
			seen[i] = 0
			kvs := r.GetResponseRange().Kvs
			if len(kvs) == 0 {
				continue
			}
			var held lease.Claim
			if err := json.Unmarshal(kvs[0].Value, &held); err != nil {
				return 0, fmt.Errorf("etcdstore: key %q holds %q, not an endpoint claim: %w", kvs[0].Key, kvs[0].Value, err)
			}
			if c.Conflicts(held) {
				return 0, &lease.ClaimConflict{Endpoint: endpoints[i], Holder: held}
			}
			seen[i] = kvs[0].ModRevision
		}
	}
	return 0, fmt.Errorf("%w: claim %v: the rows kept changing over %d attempts", lease.ErrUnavailable, endpoints, claimAttempts)
}

// grant grants an etcd lease of ttl (leaseSecs).
func (s *Store) grant(ctx context.Context, ttl time.Duration) (*clientv3.LeaseGrantResponse, error) {
	return s.cli.Grant(ctx, leaseSecs(ttl))
}

// leaseSecs is ttl rounded up to whole seconds, at least one: etcd counts
// lease TTLs in seconds.
func leaseSecs(ttl time.Duration) int64 { return int64(math.Ceil(max(ttl, time.Second).Seconds())) }

// keepAlive keeps lease id alive until ctx ends, starting over when the
// client's keep-alive stream halts (a store without a leader): a lapsed
// claim only weakens detection, never safety.
func (s *Store) keepAlive(ctx context.Context, id clientv3.LeaseID) {
	for ctx.Err() == nil {
		ch, err := s.cli.KeepAlive(ctx, id)
		if err == nil {
			for range ch {
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
