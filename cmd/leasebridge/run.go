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
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/routes"

	// Every transport registers itself.
	_ "github.com/leasebridge/leasebridge/transports/modbus"
	_ "github.com/leasebridge/leasebridge/transports/mqtt"
	_ "github.com/leasebridge/leasebridge/transports/opcua"
	_ "github.com/leasebridge/leasebridge/transports/s7"
)

// runMain is `leasebridge run -c FILE`: admission first, and a refusal
// exits before any store or transport is opened.
func runMain(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("run", stderr)
	file := fl.String("c", "", "configuration file")
	format := fl.String("log-format", "json", "json or text")
	if err := parseFlags(fl, args); err != nil {
		return flagStatus(err)
	}
	if *file == "" {
		fmt.Fprintln(stderr, "leasebridge run: -c FILE is required")
		return exitInvalid
	}
	log := newLogger(stderr, *format)
	cfg, errs := load(*file, true)
	if len(errs) > 0 {
		fmt.Fprintf(stderr, "leasebridge run: %v\n", errs)
		return exitInvalid
	}
	reports := cfg.Admit()
	refused := false
	for _, r := range reports {
		for _, why := range r.Refusals {
			refused = true
			log.Error("session refused by admission", "session", r.Session, "refusal", why)
		}
	}
	if refused {
		return exitRefused
	}
	failover.LogBudgets(log, reports)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(failover.GCPercent)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := serve(ctx, cfg, reports, log, nil)
	if err != nil {
		log.Error("run", "err", err)
	}
	return code
}

func newLogger(w io.Writer, format string) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

// serve opens the lease store, runs the supervisor with its HTTP endpoints
// until ctx ends or a step-down, and returns the process exit status.
// started, when not nil, receives the supervisor once it runs.
func serve(ctx context.Context, cfg *routes.Config, reports []admission.Report, log *slog.Logger, started chan<- *failover.Supervisor) (int, error) {
	node := cfg.Node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return exitInvalid, fmt.Errorf("node is not set and the host name is unknown: %w", err)
		}
		node = h
	}
	endpoints := cfg.LeaseStore.Endpoints
	if len(endpoints) == 0 {
		dir := filepath.Join(cfg.DataDir, "etcd")
		log.Info("no lease_store endpoints: starting the embedded single-member store", "dir", dir)
		srv, err := etcdembed.Start(ctx, dir)
		if err != nil {
			return exitInvalid, err
		}
		defer srv.Close()
		endpoints = srv.Endpoints
	}
	store, err := openStore(ctx, cfg, endpoints)
	if err != nil {
		return exitInvalid, err
	}
	defer store.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	id := lease.NewIdentity(node)
	sv, err := failover.New(failover.Options{Config: cfg, Reports: reports, Store: store, Identity: id, Node: node,
		Logger: log, Metrics: failover.NewMetrics(reg), Claims: store, Fleet: store})
	if err != nil {
		return exitInvalid, err
	}
	ln, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return exitInvalid, fmt.Errorf("http_listen %s: %w", cfg.HTTPListen, err)
	}
	hs := &http.Server{Handler: failover.Handler(sv, reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	log.Info("running", "node", node, "owner_identity", id.Owner, "http", ln.Addr().String(), "lease_store", endpoints)

	if started != nil {
		started <- sv
	}
	notifySystemd(ctx, log)
	err = sv.Run(ctx)
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	if errors.Is(err, failover.ErrStepDown) {
		return failover.ExitStepDown, nil
	}
	if err != nil {
		return exitRefused, err
	}
	log.Info("stopped: every lease released")
	return exitOK, nil
}

// openStore connects to the lease store at endpoints with the file's
// credentials and TLS.
func openStore(ctx context.Context, cfg *routes.Config, endpoints []string) (*etcdstore.Store, error) {
	password, err := cfg.LeaseStore.Password()
	if err != nil {
		return nil, fmt.Errorf("lease_store: %w", err)
	}
	sc := etcdstore.Config{Endpoints: endpoints, DialTimeout: cfg.LeaseStore.DialTimeout.D(), KeyPrefix: cfg.LeaseStore.KeyPrefix,
		Username: cfg.LeaseStore.Username, Password: password}
	if t := cfg.LeaseStore.TLS; t != nil {
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
