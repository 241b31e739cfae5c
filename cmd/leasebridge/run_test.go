package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

type proc struct {
	*bridgeProc
	proxy   *faultproxy.Proxy
	report  admission.Report
	reports []admission.Report
	exit    int
}

type runPeers struct {
	etcd   *etcdembed.Server
	broker *embedbroker.Broker
	plc    *plcsim.PLC
	dir    string
	// brokerAddr, when set, is the broker the bridges use instead of
	// broker (e.g. a mosquitto).
	brokerAddr string
}

func startRunPeers(t *testing.T) *runPeers {
	t.Helper()
	p := &runPeers{dir: t.TempDir()}
	p.etcd, p.broker, p.plc = testbin.StartEtcd(t, filepath.Join(p.dir, "etcd")), testbin.StartBroker(t), testbin.StartPLC(t, 20*time.Millisecond)
	return p
}

// start runs one `leasebridge run` process whose broker path goes through
// its own fault proxy.
func (p *runPeers) start(t *testing.T, node string) *proc {
	t.Helper()
	return p.startAt(t, node, p.etcd.Endpoints[0], nil)
}

// startVia is start with the lease store at etcdURL (a fault proxy).
func (p *runPeers) startVia(t *testing.T, node, etcdURL string) *proc {
	t.Helper()
	return p.startAt(t, node, etcdURL, nil)
}

// startWith is start with the configuration adjusted by edit (nil: none).
func (p *runPeers) startWith(t *testing.T, node string, edit func(*testbin.Bridge)) *proc {
	t.Helper()
	return p.startAt(t, node, p.etcd.Endpoints[0], edit)
}

// startAt is start with the lease store at etcdURL and the configuration
// adjusted by edit (nil: none).
func (p *runPeers) startAt(t *testing.T, node, etcdURL string, edit func(*testbin.Bridge)) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	brokerAddr := p.brokerAddr
	if brokerAddr == "" {
		brokerAddr = strings.TrimPrefix(p.broker.URL, "tcp://")
	}
	px, err := faultproxy.Start(ctx, brokerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	addr := testbin.FreeAddr(t)
	br := testbin.Bridge{Etcd: etcdURL, Broker: "tcp://" + px.Addr(), PLC: p.plc.Addr(), Node: node, HTTP: addr,
		KeyPrefix: "/run-test/", Topic: "{device}/{tag}"}
	if edit != nil {
		edit(&br)
	}
	pr := launch(t, p.dir, node, addr, testbin.Config(br))
	pr.proxy = px
	return pr
}

// launch writes configuration y to dir/node.yaml and runs `leasebridge
// run` on it, its log in dir/node.log, killed at the end of the test.
func launch(t *testing.T, dir, node, addr, y string) *proc {
	t.Helper()
	path, built := writeRoutes(t, dir, node, y)
	pr := &proc{bridgeProc: &bridgeProc{name: node, http: addr, log: filepath.Join(dir, node+".log")}, reports: built.Admit()}
	pr.report = pr.reports[0]
	pr.launch(t, path, "text")
	return pr
}

// writeRoutes writes configuration y to dir/node.yaml, parses it and builds
// its transports as the process will.
func writeRoutes(t *testing.T, dir, node, y string) (string, *preflight.Built) {
	t.Helper()
	path := filepath.Join(dir, node+".yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := routes.Parse(path, []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return path, preflightOf(t, cfg)
}

// preflightOf builds cfg's transports as admit and run do; its Admit and
// Sessions are theirs.
func preflightOf(t testing.TB, cfg *routes.Config) *preflight.Built {
	t.Helper()
	built, errs := preflight.Build(cfg, true)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return built
}

// launch runs `leasebridge run -c path` with its output in pr.log and
// kills it when the test ends, printing the log if the test failed.
func (pr *proc) launch(t *testing.T, path, logFormat string, args ...string) {
	t.Helper()
	pr.done, pr.exit = make(chan struct{}), -1
	logf, err := os.Create(pr.log)
	if err != nil {
		t.Fatal(err)
	}
	pr.cmd = exec.Command(testbin.Leasebridge(t), append([]string{"run", "-c", path, "--log-format", logFormat}, args...)...)
	pr.cmd.Stdout, pr.cmd.Stderr = logf, logf
	if err := pr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd, done := pr.cmd, pr.done
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			pr.exit = 0
		case errors.As(err, &ee):
			pr.exit = ee.ExitCode()
		}
		logf.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", pr.name, b)
		}
	})
}

func (pr *proc) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-pr.done:
		return pr.exit
	case <-time.After(limit):
		t.Fatalf("%s did not exit within %s", pr.name, limit)
		return -1
	}
}

// SIGTERM ends the owner's term in order, releases the lease and exits 0;
// the standby process takes the released row within two poll boundaries,
// two calls and its activation.
func TestRunSIGTERMReleasesAndExitsZero(t *testing.T) {
	p := startRunPeers(t)
	a := p.start(t, "node-a")
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	b := p.start(t, "node-b")
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	tm := a.report.Timing
	if code := a.waitExit(t, a.report.CloseBound+2*tm.RenewCallTimeout+2*time.Second); code != exitOK {
		t.Fatalf("exit status after SIGTERM = %d, want %d", code, exitOK)
	}
	stopped := time.Since(start)
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{b.bridgeProc}, nil, b.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	pb, _ := admission.PollBoundary(tm.AcquirePollInterval)
	if bound := stopped + 2*pb + 2*tm.RenewCallTimeout + b.report.Activation; took > bound {
		t.Errorf("standby at ServiceLevelFull %s after SIGTERM, bound %s", took, bound)
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("PLC saw %d concurrent connections", peak)
	}
	t.Logf("SIGTERM: owner exited 0 after %s; standby serving %s after the signal", stopped, took)
}

// Cutting only the owner's broker path makes the owner process step down
// and exit with status 75 (exitcode.StepDown); the other process takes
// over within the broker-path budget plus the MQTT keepalive detection
// that runs before its clock starts.
func TestRunBrokerPathStepDownExitStatus(t *testing.T) {
	p := startRunPeers(t)
	a := p.start(t, "node-a")
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	b := p.start(t, "node-b")
	time.Sleep(500 * time.Millisecond)
	cut := time.Now()
	if err := a.proxy.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	budget := a.report.BrokerPath.Total + mqtt.DetectionBound(testbin.KeepAlive)
	if code := a.waitExit(t, budget); code != exitcode.StepDown {
		t.Fatalf("owner exit status = %d, want %d", code, exitcode.StepDown)
	}
	_, st, err := waitOwner(context.Background(), []*bridgeProc{b.bridgeProc}, nil, budget)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(cut)
	if took > budget {
		t.Errorf("takeover %s after the cut, budget %s", took, budget)
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("PLC saw %d concurrent connections", peak)
	}
	t.Logf("broker path cut: owner exited %d, standby serving %s after the cut (FailureToFull %s; budget %s + detection %s)",
		exitcode.StepDown, took, time.Duration(st.FailureToFullNS), a.report.BrokerPath.Total, mqtt.DetectionBound(testbin.KeepAlive))
}

// Under systemd (Type=notify, WatchdogSec) the bridge sends READY=1 once it
// runs, then WATCHDOG=1 at half the watchdog interval, and STOPPING=1 on
// SIGTERM. The test plays systemd's notify socket.
func TestRunNotifiesSystemd(t *testing.T) {
	p := startRunPeers(t)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "200000")
	a := p.start(t, "node-a")
	got := map[string]int{}
	buf := make([]byte, 256)
	deadline := time.Now().Add(a.report.OwnerDeath.Total)
	for got["WATCHDOG=1"] < 2 && time.Now().Before(deadline) {
		_ = conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			break
		}
		got[string(buf[:n])]++
	}
	if got["READY=1"] != 1 || got["WATCHDOG=1"] < 2 {
		t.Fatalf("notifications %v, want READY=1 once and WATCHDOG=1 repeatedly", got)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		_ = conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("no STOPPING=1 after SIGTERM: %v (got %v)", err, got)
		}
		if string(buf[:n]) == "STOPPING=1" {
			break
		}
	}
	if code := a.waitExit(t, 5*time.Second); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

// standalone is a standalone node's configuration without lease_store
// endpoints, so it runs the embedded store in dataDir.
func (p *runPeers) standalone(dataDir, addr string) string {
	return fmt.Sprintf(`deployment_mode: standalone
node: gw
data_dir: %s
http_listen: %s
manager: {lease_ttl: 2s, acquire_poll_interval: 200ms, renew_call_timeout: 200ms}
brokers:
  local: {url: "%s", connect_timeout: 1s, reconcile_timeout: 1s, unmatched_grace: 300ms, close_timeout: 200ms}
devices:
  plc: {kind: modbus_tcp, address: "%s", connect_timeout: 500ms, request_timeout: 500ms, close_timeout: 200ms,
        groups: [{name: g, interval: 50ms, tags: [{name: cycles, register: holding, address: 0, type: uint16}]}]}
routes:
  - {name: telemetry, session: plc, kind: poll, device: plc, broker: local}
`, dataDir, addr, p.broker.URL, p.plc.Addr())
}

// A standalone node without lease_store endpoints runs an embedded
// single-member etcd in data_dir, and its sessions reach ServiceLevelFull
// on it.
func TestRunStandaloneEmbeddedStore(t *testing.T) {
	p := startRunPeers(t)
	dataDir := t.TempDir()
	addr := testbin.FreeAddr(t)
	gw := launch(t, t.TempDir(), "gw", addr, p.standalone(dataDir, addr))
	// The embedded member's start is part of the first takeover here.
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{gw.bridgeProc}, nil, gw.report.OwnerDeath.Total+time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "etcd", "member")); err != nil {
		t.Errorf("no embedded etcd member in data_dir: %v", err)
	}
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := gw.waitExit(t, gw.report.CloseBound+2*gw.report.Timing.RenewCallTimeout+etcdembed.CloseTimeout); code != exitcode.OK {
		t.Errorf("exit status after SIGTERM = %d, want %d", code, exitcode.OK)
	}
}
