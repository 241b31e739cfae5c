// Package etcdauth turns on etcd authentication for a fleet that is its
// own lease store, with one etcd user per certificate of lease/fleetca.
// With client certificate authentication on, etcd takes a client
// certificate's common name as the user name, so no password exists
// anywhere:
//
//   - a bridge's user has role leasebridge-bridge: read and write on the
//     fleet's key prefix (session rows, node rows, handover and drain
//     requests) and on the endpoint claims, which lease/etcdstore keeps
//     outside the prefix so that fleets see each other's claims;
//   - a reader's user has role leasebridge-reader: read only, on the same
//     key spaces (`leasebridge status`);
//   - user root, which etcd requires before authentication is turned on,
//     has no password: only the admin certificate (common name root) acts
//     as it, for member changes and snapshots.
//
// Members get no user: a gateway's member certificate carries the node
// name, the same as its bridge's, and so is the bridge's user. A member
// certificate of a node without a bridge (a witness) is authenticated but
// has no role: it can ask for the status and the member list, nothing else.
package etcdauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/redact"

	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/lease/fleetca"
)

// The roles EnsureRoles creates.
const (
	// BridgeRole may read and write the fleet's rows.
	BridgeRole = "leasebridge-bridge"
	// ReaderRole may only read them.
	ReaderRole = "leasebridge-reader"
	// RootRole is etcd's built-in administrator role.
	RootRole = "root"
	// RootUser is etcd's administrator, which must exist and hold RootRole
	// before authentication can be turned on.
	RootUser = "root"
)

// Sentinel errors.
var (
	// ErrIdentity reports a name that cannot be an etcd user of the fleet.
	ErrIdentity = errors.New("etcdauth: invalid identity")
	// ErrNotRoot reports a store that refused to change its roles: its
	// authentication is on and the certificate is not the admin's.
	ErrNotRoot = errors.New("etcdauth: the store refused: authentication is on and only the admin certificate (common name root) may change roles")
	// ErrUnreachable reports a store that did not answer.
	ErrUnreachable = errors.New("etcdauth: no member answered")
)

// Config locates the store and the certificate to act with.
type Config struct {
	Endpoints                 []string
	CAFile, CertFile, KeyFile string
	// Timeout bounds connecting and the whole of Apply.
	Timeout time.Duration
}

// Apply connects with cfg's certificate and runs EnsureRoles, telling a
// refusal (ErrNotRoot) and an unreachable store (ErrUnreachable) apart.
func Apply(ctx context.Context, cfg Config, keyPrefix string, bridges, readers []string) error {
	tc, err := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}.ClientConfig()
	if err != nil {
		return fmt.Errorf("etcdauth: tls (cert %q, key %q, ca %q): %w", cfg.CertFile, cfg.KeyFile, cfg.CAFile, err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, TLS: tc, DialTimeout: cfg.Timeout, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return fmt.Errorf("%w: %v: %w", ErrUnreachable, redact.URLs(cfg.Endpoints), err)
	}
	defer cli.Close()
	err = EnsureRoles(ctx, cli, keyPrefix, bridges, readers)
	switch e := rpctypes.Error(errors.Unwrap(err)); {
	case err == nil:
		return nil
	case errors.Is(e, rpctypes.ErrPermissionDenied) || errors.Is(e, rpctypes.ErrUserNotFound):
		return fmt.Errorf("%w: %w", ErrNotRoot, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %v: %w", ErrUnreachable, redact.URLs(cfg.Endpoints), err)
	}
	return err
}

// KeySpaces returns the key prefixes the roles cover: the fleet's key
// prefix and the endpoint claims every fleet shares.
func KeySpaces(keyPrefix string) []string {
	return []string{keyPrefix, etcdstore.ClaimPrefix}
}

// EnsureRoles creates the roles, a user without password for every bridge
// and reader name with its role, user root, and turns authentication on.
// Every step is idempotent, so it runs again to add a bridge or reader;
// once authentication is on, cli must act as root, which the admin
// certificate does (before, any certificate of the fleet can). keyPrefix
// is lease_store.key_prefix.
func EnsureRoles(ctx context.Context, cli *clientv3.Client, keyPrefix string, bridges, readers []string) error {
	if !strings.HasSuffix(keyPrefix, "/") {
		return fmt.Errorf("%w: key prefix %q must end with /", ErrIdentity, keyPrefix)
	}
	if err := checkNames(bridges, readers); err != nil {
		return err
	}
	spaces := KeySpaces(keyPrefix)
	roles := []struct {
		role   string
		perm   clientv3.PermissionType
		spaces []string
	}{
		{BridgeRole, clientv3.PermissionType(clientv3.PermReadWrite), spaces},
		{ReaderRole, clientv3.PermissionType(clientv3.PermRead), spaces},
		{RootRole, 0, nil}, // built in: all permissions, only created
	}
	for _, r := range roles {
		if err := ensureRole(ctx, cli, r.role, r.perm, r.spaces); err != nil {
			return err
		}
	}
	grants := []struct {
		names []string
		role  string
	}{{bridges, BridgeRole}, {readers, ReaderRole}, {[]string{RootUser}, RootRole}}
	for _, g := range grants {
		for _, name := range g.names {
			if err := ensureUser(ctx, cli, name, g.role); err != nil {
				return err
			}
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcdauth: auth enable: %w", err)
	}
	return nil
}

func checkNames(lists ...[]string) error {
	for _, list := range lists {
		for _, name := range list {
			if err := fleetca.CheckName(name); err != nil {
				return fmt.Errorf("%w: %w", ErrIdentity, err)
			}
		}
	}
	return nil
}

// ensureRole adds role if missing and grants perm on every key space.
func ensureRole(ctx context.Context, cli *clientv3.Client, role string, perm clientv3.PermissionType, spaces []string) error {
	if _, err := cli.RoleAdd(ctx, role); err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcdauth: add role %s: %w", role, err)
	}
	for _, p := range spaces {
		if _, err := cli.RoleGrantPermission(ctx, role, p, clientv3.GetPrefixRangeEnd(p), perm); err != nil {
			return fmt.Errorf("etcdauth: grant role %s %v on %q: %w", role, perm, p, err)
		}
	}
	return nil
}

// ensureUser adds name without a password if missing and grants it role.
func ensureUser(ctx context.Context, cli *clientv3.Client, name, role string) error {
	_, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})
	if err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcdauth: add user %s: %w", name, err)
	}
	if _, err := cli.UserGrantRole(ctx, name, role); err != nil {
		return fmt.Errorf("etcdauth: grant role %s to user %s: %w", role, name, err)
	}
	return nil
}
