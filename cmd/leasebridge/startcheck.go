package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/routes"
)

// ErrNodeNameInUse reports a node name a live process of another
// identity heartbeats: two processes started from one copied file.
var ErrNodeNameInUse = errors.New("leasebridge: the node name is in use by another live process")

// checkStart refuses, before this process competes for anything, a lease
// store user that may not read or write a key the node needs (naming the
// user, the key and the permission: a read-only user would otherwise
// stand by forever while every probe is green), and a node name another
// live process heartbeats (naming both identities). A store that does not
// answer within the check's bound is let through: the bridge then starts
// not ready, as with any outage. It returns the exit status and error
// that end the process, or ExitOK.
func checkStart(ctx context.Context, cfg *routes.Config, store runStore, node string, id lease.Identity, reports []admission.Report, log *slog.Logger) (int, error) {
	bound := cfg.LeaseStore.DialTimeout.D()
	keys := []string{etcdstore.NodesSpace + node}
	for _, r := range reports {
		bound = min(bound, r.Timing.RenewCallTimeout)
		keys = append(keys, r.Session)
	}
	// etcd's permissions are checked here; the Kubernetes store checks
	// its verbs itself when it opens.
	var err error
	if ac, ok := store.(accessChecker); ok {
		cctx, cancel := context.WithTimeout(ctx, bound)
		err = ac.CheckAccess(cctx, keys)
		cancel()
	}
	switch {
	case errors.Is(err, etcdstore.ErrPermission):
		user := cfg.LeaseStore.Username
		if user == "" {
			user = "(none: the store's guest permissions)"
		}
		return exitInvalid, fmt.Errorf("lease_store.username %s: %w; grant it read and write on key_prefix %q", user, err, cfg.LeaseStore.KeyPrefix)
	case err != nil:
		log.Warn("lease store: access not checked at start", "err", err)
		return exitOK, nil
	}
	fleet, ok := store.(lease.Fleet)
	if !ok {
		return exitOK, nil
	}
	return checkNodeName(ctx, cfg, fleet, node, id, bound)
}

// accessChecker is a store that can check its user's permissions on keys
// without writing (etcdstore.Store.CheckAccess).
type accessChecker interface {
	CheckAccess(ctx context.Context, keys []string) error
}

// checkNodeName refuses a node name whose node row another identity
// keeps rewriting. A live row of another identity that does not change
// within its interval is this node's predecessor (a crashed process, a
// restart within the row's TTL), not a twin, and is let through.
func checkNodeName(ctx context.Context, cfg *routes.Config, store lease.Fleet, node string, id lease.Identity, bound time.Duration) (int, error) {
	read := func() (lease.NodeRow, bool) {
		cctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		nodes, err := store.Nodes(cctx)
		n, ok := nodes[node]
		return n, err == nil && ok && !n.Stopped && n.Owner != id.Owner &&
			time.Now().UnixNano()-n.RenewedAt <= int64(n.TTL)
	}
	first, live := read()
	if !live {
		return exitOK, nil
	}
	select {
	case <-ctx.Done():
		return exitOK, nil
	case <-time.After(first.Interval + bound):
	}
	again, live := read()
	if !live || again.Owner != first.Owner || again.RenewedAt == first.RenewedAt {
		return exitOK, nil
	}
	at := cfg.ErrorAt("node", "")
	return exitInvalid, fmt.Errorf("%w: node %q (%s:%d) is run by %s, which rewrote its node row %s ago; this process is %s: give each process its own node name",
		ErrNodeNameInUse, node, at.File, at.Line, again.Owner, time.Duration(time.Now().UnixNano()-again.RenewedAt).Round(time.Millisecond), id.Owner)
}
