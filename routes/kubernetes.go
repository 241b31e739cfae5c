package routes

import (
	"regexp"
	"slices"
)

// nsName is a Kubernetes namespace name: a DNS label of at most 63
// characters.
var nsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// checkKubernetesStore checks lease_store.kubernetes: it replaces the etcd
// store, so the etcd keys must be unset, and its namespace must be one
// Kubernetes can name.
func (c *Config) checkKubernetesStore() Errors {
	k := c.LeaseStore.Kubernetes
	if k == nil {
		return nil
	}
	var errs Errors
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	const p = "lease_store.kubernetes"
	if len(c.LeaseStore.Endpoints) > 0 {
		add("lease_store.endpoints", "endpoints and kubernetes are two lease stores: set one (with kubernetes the rows are Lease objects, with endpoints etcd keys)")
	}
	if len(c.LeaseStore.Members) > 0 {
		add("lease_store.members", "members and kubernetes are two lease stores: set one (members run etcd, kubernetes uses the API server)")
	}
	for _, etcdKey := range []struct {
		key string
		set bool
	}{{"username", c.LeaseStore.Username != ""}, {"password_file", c.LeaseStore.PasswordFile != ""},
		{"password_env", c.LeaseStore.PasswordEnv != ""}, {"tls", c.LeaseStore.TLS != nil}} {
		if etcdKey.set {
			add("lease_store."+etcdKey.key, "%s is an etcd setting, unused with kubernetes: the API server is reached with the kubeconfig's or the service account's credentials", etcdKey.key)
		}
	}
	if ns := k.Namespace; ns != "" && (len(ns) > 63 || !nsName.MatchString(ns)) {
		add(p+".namespace", "namespace %q: want a Kubernetes namespace name (lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)", ns)
	}
	return slices.Clip(errs)
}

// StoreBackend names the lease store the file configures, for admit and
// run's log lines: Kubernetes Leases in a namespace, etcd, or the
// embedded etcd.
func (c *Config) StoreBackend() string {
	switch {
	case c.LeaseStore.Kubernetes != nil:
		if ns := c.LeaseStore.Kubernetes.Namespace; ns != "" {
			return "kubernetes Leases in namespace " + ns
		}
		return "kubernetes Leases in the pod's namespace"
	case len(c.LeaseStore.Endpoints) > 0 || len(c.LeaseStore.Members) > 0:
		return "etcd"
	}
	return "embedded etcd"
}
