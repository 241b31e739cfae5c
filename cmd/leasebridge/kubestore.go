package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/leasebridge/leasebridge/lease/kubestore"
	"github.com/leasebridge/leasebridge/routes"
)

// openKubeStore builds the Kubernetes lease store of lease_store.kubernetes
// and checks, within dial_timeout, that its identity holds every verb the
// store uses on leases: a Role missing one would only show as failed
// writes once the bridge owns a session, so run stops at once naming it
// (an error wrapping kubestore.ErrForbidden, exit status 2).
func openKubeStore(ctx context.Context, cfg *routes.Config, log *slog.Logger) (*kubestore.Store, error) {
	k := cfg.LeaseStore.Kubernetes
	s, err := kubestore.New(kubestore.Config{Namespace: k.Namespace, Kubeconfig: k.Kubeconfig, KeyPrefix: cfg.LeaseStore.KeyPrefix})
	if err != nil {
		return nil, fmt.Errorf("lease_store.kubernetes: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.LeaseStore.DialTimeout.D())
	defer cancel()
	if err := s.CheckAccess(cctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("lease_store.kubernetes: API server %s, namespace %s: %w", s.Host(), s.Namespace(), err)
	}
	log.Info("lease store: Kubernetes Leases", "api_server", s.Host(), "namespace", s.Namespace(),
		"verbs", kubestore.Verbs)
	return s, nil
}

// storeStatus is a fleet command's exit status when the Kubernetes store
// could not be opened: a configuration or a Role that lacks a verb is
// invalid usage (2), an API server that does not answer is a store down (3).
func storeStatus(err error) int {
	if errors.Is(err, kubestore.ErrConfig) || errors.Is(err, kubestore.ErrForbidden) {
		return exitInvalid
	}
	return exitStoreDown
}
