package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/lease/fleetstore"
	"github.com/leasebridge/leasebridge/routes"
)

// Exit statuses of `leasebridge store` and its subcommands
// (exitcode.StoreStatuses, rendered in docs/operations.md).
const (
	exitStoreOK          = exitcode.OK
	exitStoreFailed      = exitcode.StoreFailed
	exitStoreInvalid     = exitcode.Invalid
	exitStoreUnreachable = exitcode.StoreDown
)

// store is `leasebridge store`: the member of this file's node, or one of
// the operations on the running store.
func store(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "members":
			return storeMembers(args[1:], stdout, stderr)
		case "replace":
			return storeReplace(args[1:], stdout, stderr)
		case "snapshot":
			return storeSnapshot(args[1:], stdout, stderr)
		case "restore":
			return storeRestore(args[1:], stdout, stderr)
		case "roles":
			return storeRoles(args[1:], stdout, stderr)
		}
		return newFlags("store", stdout, stderr).usageError("unknown subcommand %q: want members, replace, snapshot, restore or roles", args[0])
	}
	return storeRun(args, stdout, stderr)
}

// loadStore loads a file that names store members; it prints why not.
func loadStore(cmd, file string, stderr io.Writer) *routes.Config {
	cfg, err := routes.Load(file)
	if err != nil {
		var errs routes.Errors
		if !errors.As(err, &errs) {
			errs = routes.Errors{{File: file, Message: readProblem(err)}}
		}
		writeInvalid(stderr, cmd, file, redactErrors(errs))
		return nil
	}
	if !cfg.StoreMembers() {
		fmt.Fprintf(stderr, "leasebridge %s: %s sets no lease_store.members: the fleet does not run its own store\n", cmd, file)
		return nil
	}
	return cfg
}

// storeRun runs this node's member until SIGTERM or SIGINT.
func storeRun(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("store", stdout, stderr)
	pf := addProcessFlags(fl)
	token := fl.String("new-cluster-token", "", "bootstrap a rebuilt cluster under `TOKEN` (the same on every member, after a quorum loss; docs/operations.md)")
	log, status := pf.parse(fl, args, stderr)
	if log == nil {
		return status
	}
	file := pf.file
	cfg := loadStore("store", *file, stderr)
	if cfg == nil {
		return exitStoreInvalid
	}
	opts, err := memberOptions(cfg, log)
	if err != nil {
		log.Error("store member refused", "err", err, "exit_status", exitStoreInvalid)
		return exitStoreInvalid
	}
	opts.ClusterToken = *token
	for _, w := range cfg.StoreWarnings() {
		log.Warn("weak lease store", "problem", w.Error())
	}
	if cfg.LeaseStore.Plaintext {
		log.Warn("lease_store.plaintext is true: members and bridges talk without TLS and without client certificates; anyone on the network can read and write every lease row")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("starting store member", "member", opts.Name, "dir", opts.Dir, "members", len(opts.Members))
	srv, err := fleetstore.Start(ctx, opts)
	if err != nil {
		return storeStartFailed(ctx, log, err)
	}
	defer srv.Close()
	log.Info("store member running", "member", opts.Name, "joined", srv.Joined)
	notifySystemd(ctx, log)
	select {
	case <-ctx.Done():
		log.Info("store member stopped")
		return exitStoreOK
	case err := <-srv.Err():
		log.Error("store member failed; exiting", "err", etcdembed.Classify(err, opts.Dir), "exit_status", exitStoreFailed)
		return exitStoreFailed
	}
}

// storeStartFailed logs why the member did not start and returns the
// exit status.
func storeStartFailed(ctx context.Context, log *slog.Logger, err error) int {
	if ctx.Err() != nil {
		log.Info("stopped before the store member was ready", "err", err)
		return exitStoreOK
	}
	code := exitStoreFailed
	if errors.Is(err, fleetstore.ErrMismatch) || errors.Is(err, fleetstore.ErrWiped) ||
		errors.Is(err, fleetstore.ErrForeignDir) || errors.Is(err, fleetstore.ErrNotMember) {
		code = exitStoreInvalid
	}
	log.Error("store member refused to start", "err", err, "exit_status", code)
	return code
}

// memberOptions are the member options of cfg's node.
func memberOptions(cfg *routes.Config, log *slog.Logger) (fleetstore.Options, error) {
	node, err := nodeName(cfg)
	if err != nil {
		return fleetstore.Options{}, err
	}
	if _, i := cfg.Member(node); i < 0 {
		fe := cfg.ErrorAt("lease_store.members", fmt.Sprintf("node %q is not one of the members: `leasebridge store` runs the member of its node (set node, or add the member)", node))
		return fleetstore.Options{}, fmt.Errorf("%w: %w", fleetstore.ErrNotMember, fe)
	}
	dir := filepath.Join(cfg.DataDir, "store")
	o := fleetstore.Options{Name: node, Members: members(cfg), Dir: dir, Heartbeat: cfg.LeaseStore.HeartbeatInterval.D(),
		Election: cfg.LeaseStore.ElectionTimeout.D(), Logger: log, TLS: tlsFiles(cfg.LeaseStore.MemberTLS, cfg.LeaseStore.Plaintext),
		OnFatal: func(err error) {
			log.Error("store member failed; exiting", "dir", dir, "err", err, "exit_status", exitStoreFailed)
			os.Exit(exitStoreFailed)
		}}
	return o, nil
}

func nodeName(cfg *routes.Config) (string, error) {
	if cfg.Node != "" {
		return cfg.Node, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node is not set and the host name is unknown: %w", err)
	}
	return h, nil
}

func members(cfg *routes.Config) []fleetstore.Member {
	out := make([]fleetstore.Member, len(cfg.LeaseStore.Members))
	for i, m := range cfg.LeaseStore.Members {
		out[i] = fleetstore.Member{Name: m.Name, PeerURL: m.PeerURL, ClientURL: m.ClientURL}
	}
	return out
}

func tlsFiles(t *routes.TLS, plaintext bool) *fleetstore.TLSFiles {
	if t == nil || plaintext {
		return nil
	}
	return &fleetstore.TLSFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}
}

// dialStore connects the store subcommands to cfg's members with the
// client certificate a bridge of this file uses.
func dialStore(cmd string, cfg *routes.Config, stderr io.Writer) (*fleetstore.Ops, int) {
	tc, err := fleetstore.ClientTLS(tlsFiles(cfg.StoreClientTLS(), cfg.LeaseStore.Plaintext))
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge %s: %v\n", cmd, err)
		return nil, exitStoreInvalid
	}
	ops, err := fleetstore.Dial(cfg.StoreEndpoints(), tc)
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge %s: %v\n", cmd, redact.Text(err.Error()))
		return nil, exitStoreUnreachable
	}
	return ops, exitStoreOK
}
