package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/httpapi"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
)

// readiness is what a process's /readyz and /metrics say.
type readiness struct {
	code    int
	storeUp bool
}

func (pr *proc) readiness() (readiness, error) {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + pr.http + "/readyz")
	if err != nil {
		return readiness{}, err
	}
	code := resp.StatusCode
	var body httpapi.Readiness
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil {
		return readiness{}, err
	}
	resp, err = c.Get("http://" + pr.http + "/metrics")
	if err != nil {
		return readiness{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return readiness{}, err
	}
	up := strings.Contains(string(b), "\nleasebridge_lease_store_up 1\n")
	if up != body.LeaseStoreUp {
		return readiness{}, errors.New("gauge and /readyz disagree")
	}
	return readiness{code: code, storeUp: up}, nil
}

// waitReadiness waits until /readyz answers code and the gauge agrees
// (1 with 200, 0 with 503), and returns the time it was first seen.
func (pr *proc) waitReadiness(t *testing.T, code int, limit time.Duration) time.Time {
	t.Helper()
	at, _ := pr.waitReadinessLag(t, code, limit)
	return at
}

// waitReadinessLag is waitReadiness that also returns the longest single
// poll it made: the observation's own latency, which grows when the
// machine is loaded (the bridge answers /readyz on the same cores).
func (pr *proc) waitReadinessLag(t *testing.T, code int, limit time.Duration) (time.Time, time.Duration) {
	t.Helper()
	return testbin.Observe(t, limit, func() (bool, string) {
		r, err := pr.readiness()
		ok := err == nil && r.code == code && r.storeUp == (code == http.StatusOK)
		return ok, fmt.Sprintf("%s: /readyz %d, lease_store_up %v (err %v); want %d", pr.name, r.code, r.storeUp, err, code)
	})
}

func (pr *proc) logText() string {
	b, _ := os.ReadFile(pr.log)
	return string(b)
}

// storeProxy puts a fault proxy in front of the peers' etcd.
func (p *runPeers) storeProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	px, err := faultproxy.Start(ctx, strings.TrimPrefix(p.etcd.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return px
}

// The lease store cut (blackholed) under a running process: /readyz 503
// and leasebridge_lease_store_up 0 within one renew_interval plus
// renew_call_timeout, one ERROR line naming the endpoint; healed: 200 and
// 1 again, one line with how long it was down.
func TestRunStoreCutReadyzAndGauge(t *testing.T) {
	p := startRunPeers(t)
	px := p.storeProxy(t)
	a := p.startVia(t, "node-a", "http://"+px.Addr())
	bound := failover.StoreDetectionBound(a.reports)
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	a.waitReadiness(t, http.StatusOK, bound)
	cut := time.Now()
	if err := px.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	at, lag := a.waitReadinessLag(t, http.StatusServiceUnavailable, 2*bound)
	seen := at.Sub(cut)
	// Judged against the bound plus the observation's own latency: one
	// poll of /readyz can take that long on a loaded machine.
	if seen > bound+lag {
		t.Errorf("store cut seen after %s, bound renew_interval + renew_call_timeout = %s (+ %s, the longest /readyz poll)", seen, bound, lag)
	}
	healed := time.Now()
	if err := px.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	back := a.waitReadiness(t, http.StatusOK, a.report.OwnerDeath.Total).Sub(healed)
	logs := a.logText()
	if n := strings.Count(logs, `msg="lease store unreachable`); n != 1 || !strings.Contains(logs, "endpoints=[http://"+px.Addr()+"]") {
		t.Errorf("want one 'lease store unreachable' line naming the endpoint, got %d", n)
	}
	if n := strings.Count(logs, `msg="lease store reachable again"`); n != 1 || !strings.Contains(logs, "down_for=") {
		t.Errorf("want one 'lease store reachable again' line with down_for, got %d", n)
	}
	t.Logf("store cut seen after %s (bound %s); ready again %s after the heal", seen, bound, back)
}

// SIGTERM while the lease store is unreachable: the release fails, the
// process says so per session and exits 1 (exitcode.Failure), never
// "every lease released".
func TestRunSIGTERMStoreUnreachableExitsFailure(t *testing.T) {
	p := startRunPeers(t)
	px := p.storeProxy(t)
	a := p.startVia(t, "node-a", "http://"+px.Addr())
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	if err := px.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	tm := a.report.Timing
	if code := a.waitExit(t, a.report.CloseBound+2*tm.RenewCallTimeout+2*time.Second); code != exitcode.Failure {
		t.Fatalf("exit status = %d, want %d", code, exitcode.Failure)
	}
	logs := a.logText()
	for _, want := range []string{`msg="lease release failed; standbys take over after lease_ttl" session=plc`,
		`msg="stopped: lease releases failed; standbys take over after lease_ttl"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if strings.Contains(logs, "every lease released") {
		t.Errorf("log claims every lease released")
	}
}

// A second process on the same data_dir ends at once with a message naming
// the directory and exit 1, instead of waiting forever on etcd's lock.
func TestRunEmbeddedDataDirLocked(t *testing.T) {
	p := startRunPeers(t)
	dataDir := t.TempDir()
	addr := testbin.FreeAddr(t)
	first := launch(t, t.TempDir(), "gw", addr, p.standalone(dataDir, addr))
	first.waitReadiness(t, http.StatusOK, etcdembed.ReadyTimeout)
	addr2 := testbin.FreeAddr(t)
	start := time.Now()
	second := launch(t, t.TempDir(), "gw2", addr2, p.standalone(dataDir, addr2))
	// Within the longest start-up wait the embedded store allows.
	if code := second.waitExit(t, etcdembed.ReadyTimeout); code != exitcode.Failure {
		t.Fatalf("second instance exit %d, want %d", code, exitcode.Failure)
	}
	logs := second.logText()
	if !strings.Contains(logs, "data directory in use by another process") || !strings.Contains(logs, filepath.Join(dataDir, "etcd")) {
		t.Errorf("second instance's log does not name the locked directory:\n%s", logs)
	}
	if r, err := first.readiness(); err != nil || r.code != http.StatusOK {
		t.Errorf("first instance after the second: %+v %v", r, err)
	}
	t.Logf("second instance on the same data_dir exited %d after %s", exitcode.Failure, time.Since(start))
}

// A full disk under data_dir (a 1 MB tmpfs) ends the process with one line
// naming the cause and exit 1, no stack trace. Mounting needs root (CI
// runs as root); where mount is refused, the test checks the
// classification of a real ENOSPC from /dev/full instead.
func TestRunEmbeddedDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Logf("mount tmpfs: %v; checking the ENOSPC classification with /dev/full", err)
		checkDevFull(t)
		return
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	p := startRunPeers(t)
	addr := testbin.FreeAddr(t)
	gw := launch(t, t.TempDir(), "gw", addr, p.standalone(dir, addr))
	if code := gw.waitExit(t, etcdembed.ReadyTimeout); code != exitcode.Failure {
		t.Fatalf("exit %d on a full disk, want %d", code, exitcode.Failure)
	}
	logs := gw.logText()
	if !strings.Contains(logs, `msg="embedded lease store failed; exiting"`) || !strings.Contains(logs, `cause="disk full (ENOSPC)"`) {
		t.Errorf("no line naming the full disk:\n%s", logs)
	}
	if strings.Contains(logs, "goroutine ") || strings.Contains(logs, "panic:") {
		t.Errorf("stack trace in the log:\n%s", logs)
	}
}

func checkDevFull(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.Write([]byte("x"))
	if err = etcdembed.Classify(err, "/dev/full"); !errors.Is(err, etcdembed.ErrDiskFull) || embeddedCause(err) != "disk full (ENOSPC)" {
		t.Fatalf("write to /dev/full: %v, not classified as a full disk", err)
	}
}

// At start-up, a lease store that refuses the credentials exits 2
// (invalid configuration); one that is unreachable while the client must
// fetch a token exits 1 (runtime failure). The password never reaches the
// log.
func TestRunStoreCredentialsAtStart(t *testing.T) {
	p := startRunPeers(t)
	c := testetcd.StartEmbedded(t, 1)
	if err := c.EnableAuth(context.Background(), "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LB_TEST_PW", "wrong-pw")
	for _, tc := range []struct {
		name, etcd string
		want       int
	}{
		{"refused", c.Endpoints()[0], exitcode.Invalid},
		{"unreachable", "http://" + testbin.FreeAddr(t), exitcode.Failure},
	} {
		addr := testbin.FreeAddr(t)
		y := testbin.Config(testbin.Bridge{Etcd: tc.etcd, Broker: p.broker.URL, PLC: p.plc.Addr(), Node: tc.name, HTTP: addr,
			KeyPrefix: "/auth-test/", Topic: "{tag}"})
		y = strings.Replace(y, "key_prefix: /auth-test/}", "key_prefix: /auth-test/, username: root, password_env: LB_TEST_PW, dial_timeout: 1s}", 1)
		pr := launch(t, t.TempDir(), tc.name, addr, y)
		// Within the dial timeout plus the process's start.
		if code := pr.waitExit(t, 10*time.Second); code != tc.want {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, tc.want, pr.logText())
		}
		if strings.Contains(pr.logText(), "wrong-pw") {
			t.Errorf("%s: the password is in the log", tc.name)
		}
	}
}

// `admit` and `run` share 0, 1 and 2, and docs/operations.md's table
// (exitcode.Statuses) lists every status run returns, once each.
func TestExitStatusesAgree(t *testing.T) {
	if exitOK != exitcode.OK || exitRefused != exitcode.Failure || exitInvalid != exitcode.Invalid {
		t.Errorf("admit's 0/1/2 (%d/%d/%d) differ from run's (%d/%d/%d)", exitOK, exitRefused, exitInvalid,
			exitcode.OK, exitcode.Failure, exitcode.Invalid)
	}
	seen := map[int]bool{}
	for _, e := range exitcode.Statuses {
		if seen[e.Code] || e.When == "" || e.Do == "" {
			t.Errorf("exit status %d listed twice or without when/do", e.Code)
		}
		seen[e.Code] = true
	}
	for _, c := range []int{exitcode.OK, exitcode.Failure, exitcode.Invalid, exitcode.StepDown} {
		if !seen[c] {
			t.Errorf("exit status %d is not in exitcode.Statuses", c)
		}
	}
}

// TestRunSIGTERMStoreUnreachableNeverOwned: a bridge whose store never
// answered owns nothing, so at SIGTERM it has nothing to release. It
// once logged `lease release failed` for a session it never owned,
// waited out its node row's TTL and exited 1. It exits 0 within the
// release bound, without a release failure.
func TestRunSIGTERMStoreUnreachableNeverOwned(t *testing.T) {
	p := startRunPeers(t)
	// A listener that never answers: the store behind a dropped route.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := p.startVia(t, "node-a", "http://"+ln.Addr().String())
	a.waitReadiness(t, http.StatusServiceUnavailable, a.report.OwnerDeath.Total)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	tm := a.report.Timing
	if code := a.waitExit(t, a.report.CloseBound+2*tm.RenewCallTimeout+2*time.Second); code != exitOK {
		t.Errorf("exit status after SIGTERM = %d, want %d", code, exitOK)
	}
	if log := a.logText(); strings.Contains(log, "release failed") || !strings.Contains(log, "stopped: every lease released") {
		t.Errorf("log after SIGTERM:\n%s", log)
	}
}
