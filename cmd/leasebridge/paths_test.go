package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
)

// sessionOf reads the one session's status from a process's /sessions.
func sessionOf(pr *proc) (failover.SessionStatus, bool) {
	st, err := sessionStatus(&http.Client{Timeout: time.Second}, pr.http)
	return st, err == nil
}

// waitSession polls pr until its session satisfies ok, at most limit, and
// returns when it did.
func waitSession(t *testing.T, pr *proc, limit time.Duration, what string, ok func(failover.SessionStatus) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if st, got := sessionOf(pr); got && ok(st) {
			return time.Now()
		}
		select {
		case <-pr.done:
			t.Fatalf("%s exited (status %d) before %s", pr.name, pr.exit, what)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s: not %s within %s", pr.name, what, limit)
	return time.Time{}
}

func metricsOf(t *testing.T, pr *proc) string {
	t.Helper()
	resp, err := http.Get("http://" + pr.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// upstreamRequests counts the requests a proxy forwarded to its target:
// what the device itself received through that node's path.
func upstreamRequests(px *faultproxy.Proxy) int64 {
	var n int64
	for _, c := range px.Stats().Conns {
		if c.Upstream {
			n += c.Requests
		}
	}
	return n
}

// A standby whose broker path never converges takes the lease when the
// owner is killed, cannot activate, and steps down (exit 75) within the
// broker-path budget counted from the start of its term, so the restarted
// healthy node serves: a refused connection, a path that drops every
// packet (the activation under way is cut short) and a wrong password.
func TestRunActivationBrokerFailureStepsDown(t *testing.T) {
	for name, mode := range map[string]faultproxy.Mode{"refused": faultproxy.Reset, "blackholed": faultproxy.Blackhole} {
		t.Run(name, func(t *testing.T) {
			p := startRunPeers(t)
			activationStepDown(t, p, nil, func(b *proc) {
				if err := b.proxy.SetMode(mode); err != nil {
					t.Fatal(err)
				}
			}, nil)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		p := startRunPeers(t)
		m := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{Users: map[string]string{"bridge": "right"}})
		dir := t.TempDir()
		pwFile := func(name, pw string) string {
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}
		good, bad := pwFile("good", "right"), pwFile("bad", "rotated-too-early")
		withPW := func(f string) func(*testbin.Bridge) {
			return func(b *testbin.Bridge) {
				b.Broker = m.URL
				b.BrokerExtra = "username: bridge, password_file: " + f
			}
		}
		activationStepDown(t, p, withPW(good), nil, withPW(bad))
	})
}

// activationStepDown runs owner A (healthy), standby B (made faulty by
// breakB after it starts, or configured so by editB), kills A, waits for B
// to own the session, restarts A as the orchestrator would, and checks that
// B exits 75 and A serves within B's broker-path budget from B's term
// start; the witness is the PLC, which sees A's requests again and never
// two connections at once.
func activationStepDown(t *testing.T, p *runPeers, editA func(*testbin.Bridge), breakB func(*proc), editB func(*testbin.Bridge)) {
	t.Helper()
	a := p.startWith(t, "node-a", editA)
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	b := p.startWith(t, "node-b", editB)
	waitSession(t, b, 10*time.Second, "standing by", func(s failover.SessionStatus) bool { return s.State == "standby" })
	if breakB != nil {
		breakB(b)
	}
	kill := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t, 5*time.Second)
	termStart := waitSession(t, b, b.report.OwnerDeath.Total, "owner", func(s failover.SessionStatus) bool { return s.Owner })
	a2 := p.startWith(t, "node-a2", editA)
	budget := b.report.BrokerPath.Total
	if code := b.waitExit(t, budget); code != exitcode.StepDown {
		t.Fatalf("faulty owner exit status = %d, want %d", code, exitcode.StepDown)
	}
	steppedDown := time.Since(termStart)
	served := a2.servedRequests(t, p, budget-time.Since(termStart))
	took := served.Sub(termStart)
	if took > budget {
		t.Errorf("healthy node serving %s after the faulty node's term started, broker-path budget %s", took, budget)
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("PLC saw %d concurrent connections", peak)
	}
	checkCause(t, a2, failover.CauseBrokerPath, time.Second, budget) // testbin.Config: broker_health_step_down 1s
	logB, _ := os.ReadFile(b.log)
	if !strings.Contains(string(logB), `msg="broker path lost: stepping down"`) || !strings.Contains(string(logB), "activated=false") {
		t.Errorf("the faulty node did not step down during its activation:\n%s", logB)
	}
	st, _ := sessionOf(a2)
	t.Logf("faulty owner exited %s after its term started; healthy node seen serving %s after it, its FailureToFullDuration (cause broker_path, from the faulty owner's first broker attempt) %s; broker-path budget %s; %s after the kill",
		steppedDown, took, time.Duration(st.FailureToFullNS), budget, time.Since(kill))
}

// checkCause checks the successor's FailureToFullDuration: labelled cause,
// and measured from the old owner's loss of its path (carried in the
// released row), so at least the threshold after which it released, and
// within the budget.
func checkCause(t *testing.T, pr *proc, cause string, threshold, budget time.Duration) {
	t.Helper()
	m := metricsOf(t, pr)
	if want := fmt.Sprintf(`leasebridge_failure_to_full_seconds_count{cause=%q,session="plc"} 1`, cause); !strings.Contains(m, want) {
		t.Errorf("%s /metrics lacks %s", pr.name, want)
	}
	st, _ := sessionOf(pr)
	if d := time.Duration(st.FailureToFullNS); d < threshold || d > budget {
		t.Errorf("%s FailureToFullDuration %s: want the old owner's part too, between the threshold %s and the budget %s", pr.name, d, threshold, budget)
	}
}

// servedRequests waits until pr is at ServiceLevelFull and the PLC has
// answered requests on pr's connection since, and returns that instant.
func (pr *proc) servedRequests(t *testing.T, p *runPeers, limit time.Duration) time.Time {
	t.Helper()
	at := waitSession(t, pr, max(limit, 0), "serving", func(s failover.SessionStatus) bool { return s.Owner && s.ServiceLevelFull })
	before := p.plc.Proxy().Stats()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.plc.Proxy().WaitFor(ctx, func(s faultproxy.Stats) bool {
		return s.Current == 1 && totalRequests(s) > totalRequests(before)
	})
	if err != nil {
		t.Fatalf("the PLC saw no request from %s after it reported serving: %v", pr.name, err)
	}
	return at
}

func totalRequests(s faultproxy.Stats) int64 {
	var n int64
	for _, c := range s.Conns {
		n += c.Requests
	}
	return n
}

// A device reachable from node A only: B owns the session first, cannot
// reach the device, releases that one session (the process keeps running)
// within the device-path budget counted from its term start, and sits out
// the cooldown; A takes over and the device sees A's requests.
func TestRunDevicePathRelease(t *testing.T) {
	p := startRunPeers(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each node reaches the PLC through its own proxy, so the device's
	// side tells which node it served.
	plcPath := func(t *testing.T) *faultproxy.Proxy {
		px, err := faultproxy.Start(ctx, p.plc.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		return px
	}
	pathA, pathB := plcPath(t), plcPath(t)
	if err := pathB.SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	const threshold = time.Second
	edit := func(px *faultproxy.Proxy) func(*testbin.Bridge) {
		return func(b *testbin.Bridge) {
			b.PLC = px.Addr()
			b.Manager = fmt.Sprintf("  device_path_step_down: %s\n", threshold)
		}
	}
	b := p.startWith(t, "node-b", edit(pathB))
	if b.report.DevicePath == nil {
		t.Fatalf("device path not admitted as on: %+v", b.report)
	}
	termStart := waitSession(t, b, b.report.OwnerDeath.Total, "owner", func(s failover.SessionStatus) bool { return s.Owner })
	a := p.startWith(t, "node-a", edit(pathA))
	budget := b.report.DevicePath.Total
	served := a.servedRequests(t, p, budget)
	took := served.Sub(termStart)
	if took > budget {
		t.Errorf("node A serving %s after B's term started, device-path budget %s", took, budget)
	}
	if n := upstreamRequests(pathA); n == 0 {
		t.Errorf("the PLC saw no request through node A's path")
	}
	if n := upstreamRequests(pathB); n != 0 {
		t.Errorf("the PLC saw %d requests through node B's cut path", n)
	}
	st, ok := sessionOf(b)
	if !ok || st.Owner || (st.State != "cooldown" && st.State != "standby") {
		t.Errorf("node B after its device-path release: %+v (want cooldown or standby, not owner)", st)
	}
	select {
	case <-b.done:
		t.Errorf("node B exited (status %d): a device-path release must keep the process", b.exit)
	default:
	}
	m := metricsOf(t, b)
	for _, want := range []string{
		`leasebridge_device_step_downs_total{session="plc"} 1`,
		fmt.Sprintf(`leasebridge_failover_budget_seconds{mode="device_path",session="plc"} %g`, budget.Seconds()),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("node B /metrics lacks %s", want)
		}
	}
	if peak := p.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("PLC saw %d concurrent connections", peak)
	}
	checkCause(t, a, failover.CauseDevicePath, threshold, budget)
	st, _ = sessionOf(a)
	t.Logf("device path: B released, A seen serving %s after B's term started, its FailureToFullDuration (cause device_path) %s; device-path budget %s, cooldown %s",
		took, time.Duration(st.FailureToFullNS), budget, b.report.DevicePathCooldown)
}
