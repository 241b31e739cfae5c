package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/httpapi"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/lease/kubestore"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"

	// Every transport registers itself: its connection and its config.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

// runMain is `leasebridge run -c FILE`: admission first, and a refusal
// exits before any store or transport is opened.
func runMain(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("run", stdout, stderr)
	pf := addProcessFlags(fl)
	log, status := pf.parse(fl, args, stderr)
	if log == nil {
		return status
	}
	file := pf.file
	slog.SetDefault(log)
	cfg, built, errs := load(*file, true)
	if len(errs) > 0 {
		writeInvalid(stderr, "run", *file, errs)
		return exitcode.Invalid
	}
	if cfg.IsWitness() {
		fmt.Fprintf(stderr, "leasebridge run: %s is a witness's file (lease_store.members and no routes): there is nothing to bridge; run its member with `leasebridge store -c %s`\n", *file, *file)
		return exitcode.Invalid
	}
	reports := built.Admit()
	refused := false
	for _, r := range reports {
		for _, why := range r.Refusals {
			refused = true
			log.Error("session refused by admission", "session", r.Session, "refusal", why)
		}
	}
	if refused {
		return exitcode.Failure
	}
	failover.LogBudgets(log, reports)
	for _, w := range cfg.Warnings() {
		log.Warn("configuration", "at", fmt.Sprintf("%s:%d", w.File, w.Line), "key", w.Path, "warning", w.Message)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(failover.GCPercent)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	profileOnSignal(ctx, log)
	code, err := serve(ctx, built, cfg, reports, log, nil)
	if err != nil {
		log.Error("run failed", "err", err, "exit_status", code)
	}
	return code
}

// serve opens the lease store, runs the supervisor with its HTTP endpoints
// until ctx ends or a step-down, and returns the process exit status.
// built is what load built from cfg, whose devices the first terms open;
// started, when not nil, receives the supervisor once it runs.
func serve(ctx context.Context, built *preflight.Built, cfg *routes.Config, reports []admission.Report, log *slog.Logger, started chan<- *failover.Supervisor) (int, error) {
	node := cfg.Node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return exitcode.Invalid, fmt.Errorf("node is not set and the host name is unknown: %w", err)
		}
		node = h
	}
	endpoints := cfg.StoreEndpoints()
	if cfg.LeaseStore.Kubernetes != nil {
		ks, err := openKubeStore(ctx, cfg, log)
		if err != nil {
			return storeExit(err), err
		}
		defer ks.Close()
		return serveWith(ctx, built, cfg, reports, log, started, node, ks, []string{ks.Host()})
	}
	if len(endpoints) == 0 {
		srv, err := startEmbedded(ctx, cfg, log)
		if err != nil && ctx.Err() != nil {
			// SIGTERM or SIGINT during start-up: nothing was held.
			log.Info("stopped before the embedded store was ready", "err", err)
			return exitcode.OK, nil
		}
		if err != nil {
			embeddedFailed(log, err)
			return exitcode.Failure, nil
		}
		defer srv.Close()
		endpoints = srv.Endpoints
	}
	store, err := openStore(ctx, cfg, endpoints)
	if err != nil {
		return storeExit(err), err
	}
	defer store.Close()
	return serveWith(ctx, built, cfg, reports, log, started, node, store, endpoints)
}

// runStore is a lease store run can serve on: rows and endpoint claims,
// and, when the store keeps them, fleet rows (lease.Fleet).
type runStore interface {
	lease.Store
	lease.Claimer
}

// serveWith is serve once the store is open.
func serveWith(ctx context.Context, built *preflight.Built, cfg *routes.Config, reports []admission.Report, log *slog.Logger,
	started chan<- *failover.Supervisor, node string, store runStore, endpoints []string) (int, error) {
	var fleet lease.Fleet
	if f, ok := store.(lease.Fleet); ok {
		fleet = f
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	id := lease.NewIdentity(node)
	if code, err := checkStart(ctx, cfg, store, node, id, reports, log); err != nil {
		return code, err
	}
	sv, err := failover.New(failover.Options{Config: cfg, Reports: reports, Built: built, Store: store, StoreEndpoints: endpoints,
		Identity: id, Node: node, Logger: log, Metrics: failover.NewMetrics(reg), Claims: store, Fleet: fleet})
	if err != nil {
		return exitcode.Invalid, err
	}
	ln, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return exitcode.Invalid, fmt.Errorf("http_listen %s: %w", cfg.HTTPListen, err)
	}
	hs := &http.Server{Handler: httpapi.Handler(sv, reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	log.Info("running", "node", node, "owner_identity", id.Owner, "http", ln.Addr().String(), "lease_store", redact.URLs(endpoints))

	if started != nil {
		started <- sv
	}
	notifySystemd(ctx, log)
	err = sv.Run(ctx)
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	switch {
	case errors.Is(err, failover.ErrStepDown):
		log.Error("exiting after the step-down", "exit_status", exitcode.StepDown)
		return exitcode.StepDown, nil
	case errors.Is(err, failover.ErrReleaseFailed):
		log.Error("stopped: lease releases failed; standbys take over after lease_ttl", "err", err,
			"exit_status", exitcode.Failure)
		return exitcode.Failure, nil
	case err != nil:
		return exitcode.Failure, err
	}
	log.Info("stopped: every lease released")
	return exitcode.OK, nil
}

// storeExit is the exit status for a lease store the client could not
// set up at start-up: refused credentials are a configuration mistake
// (ExitInvalid); anything else, such as a store unreachable while the
// client must fetch an authentication token, is a runtime failure that a
// restart retries (ExitFailure). Without authentication the client
// connects in the background, and an unreachable store is reported by the
// store probe (not ready) instead of ending the process.
func storeExit(err error) int {
	if errors.Is(err, etcdstore.ErrAuth) || errors.Is(err, etcdstore.ErrConfig) ||
		errors.Is(err, kubestore.ErrConfig) || errors.Is(err, kubestore.ErrForbidden) {
		return exitcode.Invalid
	}
	return exitcode.Failure
}

// startEmbedded starts the embedded single-member store in data_dir. Its
// warnings and errors go to log; an unrecoverable error while it runs (a
// full disk) is logged with its cause and ends the process with
// ExitFailure, without a stack trace.
func startEmbedded(ctx context.Context, cfg *routes.Config, log *slog.Logger) (*etcdembed.Server, error) {
	dir := filepath.Join(cfg.DataDir, "etcd")
	log.Info("no lease_store endpoints: starting the embedded single-member store", "dir", dir)
	return etcdembed.StartWith(ctx, etcdembed.Options{Dir: dir, Logger: log, OnFatal: func(err error) {
		embeddedFailed(log.With("dir", dir), err)
		os.Exit(exitcode.Failure)
	}})
}

// embeddedFailed is the one line that says why the embedded store ended
// the process.
func embeddedFailed(log *slog.Logger, err error) {
	log.Error("embedded lease store failed; exiting", "cause", embeddedCause(err), "err", err,
		"exit_status", exitcode.Failure)
}

// embeddedCause names why the embedded store stopped, for the log line.
func embeddedCause(err error) string {
	switch {
	case errors.Is(err, etcdembed.ErrDiskFull):
		return "disk full (ENOSPC)"
	case errors.Is(err, etcdembed.ErrLocked):
		return "data_dir in use by another process"
	}
	return "embedded etcd error"
}

// openStore connects to the lease store at endpoints with the file's
// credentials and TLS.
func openStore(ctx context.Context, cfg *routes.Config, endpoints []string) (*etcdstore.Store, error) {
	password, err := cfg.LeaseStore.Password()
	if err != nil {
		return nil, fmt.Errorf("%w: lease_store: %w", etcdstore.ErrConfig, err)
	}
	sc := etcdstore.Config{Endpoints: endpoints, DialTimeout: cfg.LeaseStore.DialTimeout.D(), KeyPrefix: cfg.LeaseStore.KeyPrefix,
		Username: cfg.LeaseStore.Username, Password: password}
	if t := cfg.StoreClientTLS(); t != nil {
		sc.CAFile, sc.CertFile, sc.KeyFile = t.CAFile, t.CertFile, t.KeyFile
	}
	return etcdstore.New(ctx, sc)
}

// notifySystemd tells a Type=notify unit that the bridge runs and, when
// WatchdogSec is set, pings the watchdog at half its interval. A frozen
// process stops pinging, so systemd kills it: that bounds how long a
// frozen owner's sockets linger.
func notifySystemd(ctx context.Context, log *slog.Logger) {
	if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("systemd notify", "err", err)
	} else if !ok {
		return // not under systemd
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	go func() {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}()
}
