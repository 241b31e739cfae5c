package fleetstore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasebridge/leasebridge/lease/etcdstore"
)

// The roles EnsureRoles gives: with authentication on, etcd names a
// client by its certificate's common name, and a name without a role can
// do nothing.
const (
	// BridgeRole reads and writes the fleet's rows and the endpoint
	// claims: every bridge, and the store tools' snapshot and restore.
	BridgeRole = "leasebridge-bridge"
	// ReaderRole only reads them: `leasebridge status` for a monitor.
	ReaderRole = "leasebridge-reader"
	// RootUser is etcd's administrator, the only name that may change
	// members or roles once authentication is on.
	RootUser = "root"
)

// Roles is what EnsureRoles set up.
type Roles struct {
	KeyPrefix string   `json:"key_prefix"`
	Bridges   []string `json:"bridges"`
	Readers   []string `json:"readers"`
	// AuthEnabled is true once authentication is on (it stays on).
	AuthEnabled bool `json:"auth_enabled"`
}

// EnsureRoles creates BridgeRole and ReaderRole on the rows under prefix
// and the endpoint claims, a user per certificate name in bridges and
// readers holding its role, and the root user, then turns authentication
// on. It can run again to add names; once authentication is on, only a
// client whose certificate names RootUser may run it.
func (o *Ops) EnsureRoles(ctx context.Context, prefix string, bridges, readers []string) (Roles, error) {
	r := Roles{KeyPrefix: prefix, Bridges: bridges, Readers: readers}
	for role, perm := range map[string]clientv3.PermissionType{
		BridgeRole: clientv3.PermissionType(authpb.READWRITE), ReaderRole: clientv3.PermissionType(authpb.READ),
	} {
		if _, err := o.cli.RoleAdd(ctx, role); ignoreExists(err) != nil {
			return r, fmt.Errorf("fleetstore: add role %s: %w", role, err)
		}
		for _, p := range []string{prefix, etcdstore.ClaimPrefix} {
			if _, err := o.cli.RoleGrantPermission(ctx, role, p, clientv3.GetPrefixRangeEnd(p), perm); err != nil {
				return r, fmt.Errorf("fleetstore: grant %v on %q to role %s: %w", authpb.Permission_Type(perm), p, role, err)
			}
		}
	}
	users := map[string]string{RootUser: "root"}
	for _, n := range readers {
		users[n] = ReaderRole
	}
	for _, n := range bridges {
		users[n] = BridgeRole
	}
	for name, role := range users {
		if _, err := o.cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); ignoreExists(err) != nil {
			return r, fmt.Errorf("fleetstore: add user %s: %w", name, err)
		}
		if _, err := o.cli.UserGrantRole(ctx, name, role); err != nil {
			return r, fmt.Errorf("fleetstore: grant role %s to %s: %w", role, name, err)
		}
	}
	if _, err := o.cli.AuthEnable(ctx); err != nil {
		return r, fmt.Errorf("fleetstore: enable authentication: %w", err)
	}
	r.AuthEnabled = true
	return r, nil
}

// ignoreExists drops etcd's "already exists" answers, so EnsureRoles can
// run again.
func ignoreExists(err error) error {
	switch e := rpctypes.Error(err); {
	case err == nil, errors.Is(e, rpctypes.ErrRoleAlreadyExist), errors.Is(e, rpctypes.ErrUserAlreadyExist):
		return nil
	}
	return err
}
