package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/lease"
)

// ErrPermission reports a lease store user that may not read or write a
// key the bridge needs: a configuration mistake, like a wrong password.
var ErrPermission = errors.New("etcdstore: the lease store denies the user a permission the bridge needs")

// CheckAccess checks, writing nothing, that the client may read and write
// each key (below the prefix). One transaction whose comparison can never
// hold carries a read and a write of every key in the branch it never
// takes: etcd checks the permission of every operation of a transaction,
// taken or not. When it is denied, each key is tried alone, and the error
// names the first key and the permission it lacks. Any other failure is
// lease.ErrUnavailable.
func (s *Store) CheckAccess(ctx context.Context, keys []string) error {
	// Two operations a key, within etcd's default --max-txn-ops (128).
	const chunk = 50
	for i := 0; i < len(keys); i += chunk {
		if err := s.checkChunk(ctx, keys[i:min(i+chunk, len(keys))]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) checkChunk(ctx context.Context, keys []string) error {
	err := s.access(ctx, keys, true, true)
	if !denied(err) {
		return err
	}
	for _, k := range keys {
		for _, p := range []struct {
			name        string
			read, write bool
		}{{"read", true, false}, {"write", false, true}} {
			if err := s.access(ctx, []string{k}, p.read, p.write); denied(err) {
				return fmt.Errorf("%w: %s on key %q", ErrPermission, p.name, s.prefix+k)
			}
		}
	}
	return fmt.Errorf("%w: on the keys %q together", ErrPermission, keys)
}

func (s *Store) access(ctx context.Context, keys []string, read, write bool) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ops []clientv3.Op
	for _, k := range keys {
		if read {
			ops = append(ops, clientv3.OpGet(s.prefix+k, clientv3.WithCountOnly()))
		}
		if write {
			ops = append(ops, clientv3.OpPut(s.prefix+k, ""))
		}
	}
	// A version is never negative: the branch is never taken.
	never := clientv3.Compare(clientv3.Version(s.prefix+keys[0]), "<", 0)
	if _, err := s.cli.Txn(ctx).If(never).Then(ops...).Commit(); err != nil {
		if denied(err) {
			return err
		}
		return fmt.Errorf("%w: check access to %q: %w", lease.ErrUnavailable, s.prefix+keys[0], err)
	}
	return nil
}

func denied(err error) bool {
	return err != nil && rpctypes.Error(err) == rpctypes.ErrPermissionDenied
}
