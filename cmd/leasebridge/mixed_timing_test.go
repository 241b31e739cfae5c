package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mbserver "github.com/simonvetter/modbus"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/routes"
)

// devRequest is one request the device served: which connection sent it
// and when, in the order the device handled them.
type devRequest struct {
	seq  int
	conn string // the client's address: one per TCP connection
	at   time.Time
}

// loggingPLC is a Modbus TCP server that records every request with its
// connection and instant: the witness for "never two clients".
type loggingPLC struct {
	srv  *mbserver.ModbusServer
	addr string

	mu   sync.Mutex
	reqs []devRequest
	regs [2]uint16
}

func startLoggingPLC(t *testing.T) *loggingPLC {
	t.Helper()
	p := &loggingPLC{addr: testbin.FreeAddr(t)}
	srv, err := mbserver.NewServer(&mbserver.ServerConfiguration{
		URL: "tcp://" + p.addr, Timeout: time.Minute, MaxClients: 16, Logger: log.New(io.Discard, "", 0),
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	p.srv = srv
	t.Cleanup(func() { _ = srv.Stop() })
	return p
}

func (p *loggingPLC) record(conn string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, devRequest{seq: len(p.reqs), conn: conn, at: time.Now()})
}

// HandleHoldingRegisters serves the two registers the bridge polls.
func (p *loggingPLC) HandleHoldingRegisters(req *mbserver.HoldingRegistersRequest) ([]uint16, error) {
	p.record(req.ClientAddr)
	if int(req.Addr)+int(req.Quantity) > len(p.regs) {
		return nil, mbserver.ErrIllegalDataAddress
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.regs[0]++
	if req.IsWrite {
		copy(p.regs[req.Addr:], req.Args)
	}
	return append([]uint16(nil), p.regs[req.Addr:req.Addr+req.Quantity]...), nil
}

// HandleCoils is not used by the test configuration.
func (p *loggingPLC) HandleCoils(req *mbserver.CoilsRequest) ([]bool, error) {
	p.record(req.ClientAddr)
	return nil, mbserver.ErrIllegalFunction
}

// HandleDiscreteInputs is not used by the test configuration.
func (p *loggingPLC) HandleDiscreteInputs(req *mbserver.DiscreteInputsRequest) ([]bool, error) {
	p.record(req.ClientAddr)
	return nil, mbserver.ErrIllegalFunction
}

// HandleInputRegisters is not used by the test configuration.
func (p *loggingPLC) HandleInputRegisters(req *mbserver.InputRegistersRequest) ([]uint16, error) {
	p.record(req.ClientAddr)
	return nil, mbserver.ErrIllegalFunction
}

// connSpan is one connection's first and last request.
type connSpan struct {
	conn        string
	first, last devRequest
	requests    int
}

// spans returns every connection's requests as spans, in the order of
// their first request, and an error naming the first two connections
// whose requests interleave: two clients on the device at once.
func (p *loggingPLC) spans() ([]connSpan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []connSpan
	idx := map[string]int{}
	for _, r := range p.reqs {
		i, ok := idx[r.conn]
		if !ok {
			i = len(out)
			idx[r.conn] = i
			out = append(out, connSpan{conn: r.conn, first: r})
		}
		out[i].last = r
		out[i].requests++
	}
	for i := 1; i < len(out); i++ {
		if prev, cur := out[i-1], out[i]; prev.last.seq >= cur.first.seq {
			return out, fmt.Errorf("two clients on the device: connection %s (requests %s..%s) and %s (first request %s, %s before the other's last)",
				prev.conn, prev.first.at.Format(time.StampMicro), prev.last.at.Format(time.StampMicro),
				cur.conn, cur.first.at.Format(time.StampMicro), prev.last.at.Sub(cur.first.at))
		}
	}
	return out, nil
}

// servedSince counts requests after t.
func (p *loggingPLC) servedSince(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.reqs {
		if r.at.After(t) {
			n++
		}
	}
	return n
}

// mixedFleet is one etcd, one broker, the logging PLC and bridge processes
// with their own lease timing, each reaching etcd through its own proxy.
type mixedFleet struct {
	etcd   *etcdembed.Server
	broker *embedbroker.Broker
	plc    *loggingPLC
	dir    string
	// debug runs the bridges with --log-level debug (handoverTrace reads
	// their debug lines).
	debug bool
}

func startMixedFleet(t *testing.T) *mixedFleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &mixedFleet{dir: t.TempDir(), plc: startLoggingPLC(t)}
	var err error
	if f.etcd, err = etcdembed.Start(ctx, filepath.Join(f.dir, "etcd")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.etcd.Close)
	if f.broker, err = embedbroker.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.broker.Close() })
	return f
}

// mixedProc is one bridge process of a mixed fleet.
type mixedProc struct {
	proc
	fleet   *mixedFleet
	path    string
	session routes.Session
	starts  int
}

// start writes node's configuration, the shared one with lease_ttl and
// renew_interval replaced, and runs it; node's etcd path goes through its
// own fault proxy (proxy).
func (f *mixedFleet) start(t *testing.T, node string, leaseTTL, renew time.Duration) *mixedProc {
	t.Helper()
	return f.startEdited(t, node, func(y string) string {
		const shared = "  lease_ttl: 2s\n  renew_interval: 300ms\n"
		if !strings.Contains(y, shared) {
			t.Fatalf("the shared test configuration no longer has %q", shared)
		}
		return strings.Replace(y, shared, fmt.Sprintf("  lease_ttl: %s\n  renew_interval: %s\n", leaseTTL, renew), 1)
	})
}

// startEdited runs node with the shared configuration as edit returns it.
func (f *mixedFleet) startEdited(t *testing.T, node string, edit func(string) string) *mixedProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	etcdAddr := strings.TrimPrefix(f.etcd.Endpoints[0], "http://")
	px, err := faultproxy.Start(ctx, etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	addr := testbin.FreeAddr(t)
	y := edit(testbin.Config(testbin.Bridge{Etcd: "http://" + px.Addr(), Broker: f.broker.URL, PLC: f.plc.addr, Node: node, HTTP: addr,
		KeyPrefix: "/mixed-test/", Topic: "{device}/{tag}"}))
	path, built := writeRoutes(t, f.dir, node, y)
	mp := &mixedProc{fleet: f, path: path}
	mp.proc = proc{bridgeProc: &bridgeProc{name: node, http: addr}, proxy: px, report: built.Admit()[0]}
	if !mp.report.Admitted() {
		t.Fatalf("%s refused: %v", node, mp.report.Refusals)
	}
	mp.session = built.Sessions()[0]
	mp.restart(t)
	return mp
}

// restart runs the process again, logging to a new file.
func (mp *mixedProc) restart(t *testing.T) {
	t.Helper()
	mp.starts++
	mp.log = filepath.Join(mp.fleet.dir, fmt.Sprintf("%s.%d.log", mp.name, mp.starts))
	var args []string
	if mp.fleet.debug {
		args = []string{"--log-level", "debug"}
	}
	mp.launch(t, mp.path, "json", args...)
}

// stop sends sig and waits for the exit.
func (mp *mixedProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := mp.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	mp.waitExit(t, mp.report.CloseBound+2*mp.report.Timing.RenewCallTimeout+10*time.Second)
}

// mixedBudget is the owner-death budget of standby b taking over from
// owner a: b's budget with the larger lease_ttl of the two.
func mixedBudget(t *testing.T, a, b *mixedProc) time.Duration {
	t.Helper()
	tm := b.report.Timing
	tm.LeaseTTL = max(a.report.Timing.LeaseTTL, tm.LeaseTTL)
	od, err := admission.OwnerDeath(tm, b.report.Activation, b.session.Inputs.StartupAllowance)
	if err != nil {
		t.Fatal(err)
	}
	return od.Total
}

// readyz returns the process's session status from /sessions.
func (mp *mixedProc) readyz(t *testing.T) failover.SessionStatus {
	t.Helper()
	st, err := sessionStatus(http.DefaultClient, mp.http)
	if err != nil {
		t.Fatalf("%s: %v", mp.name, err)
	}
	return st
}

// metrics returns the process's /metrics text.
func (mp *mixedProc) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + mp.http + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", mp.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitMismatch waits until the process reports a timing mismatch on
// /sessions; limit is a test timeout, not a budget.
func (mp *mixedProc) waitMismatch(t *testing.T, limit time.Duration) failover.TimingMismatch {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, err := sessionStatus(http.DefaultClient, mp.http); err == nil && st.TimingMismatch != nil {
			return *st.TimingMismatch
		}
	}
	t.Fatalf("%s showed no timing mismatch on /sessions within %s", mp.name, limit)
	return failover.TimingMismatch{}
}

// mismatchLogs returns the process's JSON log lines that warn of a timing
// mismatch.
func (mp *mixedProc) mismatchLogs(t *testing.T) []map[string]any {
	t.Helper()
	f, err := os.Open(mp.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(fmt.Sprint(line["msg"]), "lease timing differs") {
			out = append(out, line)
		}
	}
	return out
}

// checkMismatchShown asserts that standby b, whose owner a runs another
// timing, shows it on /readyz, in its metrics and once in its log.
func checkMismatchShown(t *testing.T, a, b *mixedProc) {
	t.Helper()
	la, lb := a.report.Timing.LeaseTTL, b.report.Timing.LeaseTTL
	mm := b.waitMismatch(t, b.report.OwnerDeath.Total)
	if mm.Row.LeaseTTL != la || mm.Own.LeaseTTL != lb || time.Duration(mm.TakeoverWaitNS) != max(la, lb) || !mm.RowHasTiming ||
		!strings.HasPrefix(mm.RowOwner, a.name+"#") {
		t.Errorf("%s /readyz timing_mismatch %+v: want row lease_ttl %s from %s, own %s, wait %s", b.name, mm, la, a.name, lb, max(la, lb))
	}
	m := b.metrics(t)
	for _, want := range []string{`leasebridge_timing_mismatch{session="plc"} 1`, `leasebridge_timing_mismatches_total{session="plc"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("%s /metrics lacks %s", b.name, want)
		}
	}
	logs := b.mismatchLogs(t)
	if len(logs) != 1 {
		t.Fatalf("%s logged the mismatch %d times, want once: %v", b.name, len(logs), logs)
	}
	l := logs[0]
	if l["level"] != "WARN" || !strings.Contains(fmt.Sprint(l["row_timing"]), "lease_ttl="+admission.FormatSeconds(la)) ||
		!strings.Contains(fmt.Sprint(l["own_timing"]), "lease_ttl="+admission.FormatSeconds(lb)) || l["takeover_wait"] != admission.FormatSeconds(max(la, lb)) {
		t.Errorf("%s mismatch log line %v", b.name, l)
	}
	if s := a.readyz(t); s.TimingMismatch != nil {
		t.Errorf("owner %s reports a mismatch with its own row: %+v", a.name, s.TimingMismatch)
	}
}

// The issue 11 reproduction at lab scale (lease_ttl 20s vs 6s with
// renew_interval 2s, divided by five): node A runs lease_ttl 4s, node B
// 1.2s, both admitted. A's etcd path is cut silently while it owns the
// PLC. B must wait A's lease_ttl, not its own: the device's request log
// shows A's last request strictly before B's first, B serves within the
// mixed-fleet owner-death budget, and B shows the mismatch on /readyz,
// /metrics and once in its log.
func TestMixedTimingOwnerStorePathCut(t *testing.T) {
	f := startMixedFleet(t)
	a := f.start(t, "node-a", 4*time.Second, 400*time.Millisecond)
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	b := f.start(t, "node-b", 1200*time.Millisecond, 300*time.Millisecond)
	checkMismatchShown(t, a, b)

	cut := time.Now()
	if err := a.proxy.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	budget := mixedBudget(t, a, b)
	_, st, err := waitOwner(context.Background(), []*bridgeProc{b.bridgeProc}, nil, budget)
	if err != nil {
		t.Fatalf("node-b: %v (mixed-fleet owner-death budget %s)", err, budget)
	}
	took := time.Since(cut)
	spans, err := f.plc.spans()
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) < 2 {
		t.Fatalf("the device saw %d connections, want node-a's then node-b's", len(spans))
	}
	old, next := spans[len(spans)-2], spans[len(spans)-1]
	if !old.last.at.After(cut) || old.first.at.After(cut) {
		t.Errorf("the connection before the takeover (%s) did not serve across the cut: requests %s..%s, cut %s",
			old.conn, old.first.at.Format(time.StampMicro), old.last.at.Format(time.StampMicro), cut.Format(time.StampMicro))
	}
	if took > budget {
		t.Errorf("node-b at ServiceLevelFull %s after the cut, mixed-fleet owner-death budget %s", took, budget)
	}
	if m := b.metrics(t); !strings.Contains(m, `leasebridge_timing_mismatch{session="plc"} 0`) {
		t.Errorf("node-b owns the row: leasebridge_timing_mismatch should be 0")
	}
	t.Logf("A (lease_ttl %s) cut at %s; A's last device request %s after the cut, B's first %s after (gap %s); B serving %s after the cut (FailureToFull %s, mixed budget %s)",
		a.report.Timing.LeaseTTL, cut.Format(time.StampMicro), old.last.at.Sub(cut), next.first.at.Sub(cut), next.first.at.Sub(old.last.at),
		took, time.Duration(st.FailureToFullNS), budget)

	// Healed, A finds B's row and, as a standby now, reports the mismatch
	// the other way round; it never takes over from the live B.
	if err := a.proxy.SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	if err := a.proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	if mm := a.waitMismatch(t, 30*time.Second); mm.Row.LeaseTTL != b.report.Timing.LeaseTTL || time.Duration(mm.TakeoverWaitNS) != a.report.Timing.LeaseTTL {
		t.Errorf("node-a after the heal: mismatch %+v", mm)
	}
	if s := a.readyz(t); s.Owner {
		t.Errorf("node-a took the row back from a live node-b")
	}
	if _, err := f.plc.spans(); err != nil {
		t.Fatal(err)
	}
	// B keeps polling: wait for its next request rather than expect one
	// already logged (a loaded machine delays it), bounded by B's budget.
	for deadline := time.Now().Add(b.report.OwnerDeath.Total); f.plc.servedSince(healed) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the device served nothing within %s after the heal", b.report.OwnerDeath.Total)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Without any fault: A renews only every 1.6s (lease_ttl 4s), B's own
// lease_ttl is 1.2s, shorter than A's renew interval. Judged by its own
// lease_ttl B would take over from the live A at almost every renew gap;
// it must not. Then ownership moves back and forth (A killed, A and B
// stopped with SIGTERM) and the device never sees two clients.
func TestMixedTimingNoFaultNoOverlap(t *testing.T) {
	f := startMixedFleet(t)
	a := f.start(t, "node-a", 4*time.Second, 1600*time.Millisecond)
	owner := func(p *mixedProc, limit time.Duration) {
		t.Helper()
		if _, _, err := waitOwner(context.Background(), []*bridgeProc{p.bridgeProc}, nil, limit); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	owner(a, a.report.OwnerDeath.Total)
	b := f.start(t, "node-b", 1200*time.Millisecond, 300*time.Millisecond)
	checkMismatchShown(t, a, b)
	takeovers := 0
	for round, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		// Three of A's renew rounds at their longest, B polling.
		tm := a.report.Timing
		watch := 3 * (tm.RenewInterval + tm.RenewJitter/2 + tm.RenewCallTimeout)
		for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if s := b.readyz(t); s.Owner {
				t.Fatalf("round %d: node-b took over from the live node-a", round)
			}
		}
		stopped := time.Now()
		a.stop(t, sig)
		owner(b, mixedBudget(t, a, b))
		if took := time.Since(stopped); took > mixedBudget(t, a, b) {
			t.Errorf("round %d: node-b serving %s after node-a's %s, mixed-fleet owner-death budget %s", round, took, sig, mixedBudget(t, a, b))
		}
		takeovers++
		a.restart(t)
		a.waitMismatch(t, a.report.OwnerDeath.Total)
		stopped = time.Now()
		b.stop(t, syscall.SIGTERM)
		owner(a, mixedBudget(t, b, a))
		if took := time.Since(stopped); took > mixedBudget(t, b, a) {
			t.Errorf("round %d: node-a serving %s after node-b's SIGTERM, budget %s", round, took, mixedBudget(t, b, a))
		}
		takeovers++
		b.restart(t)
		b.waitMismatch(t, b.report.OwnerDeath.Total)
	}
	spans, err := f.plc.spans()
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) < takeovers+1 {
		t.Fatalf("the device saw %d connections for %d takeovers", len(spans), takeovers)
	}
	gap := time.Duration(1 << 62)
	for i := 1; i < len(spans); i++ {
		gap = min(gap, spans[i].first.at.Sub(spans[i-1].last.at))
	}
	t.Logf("%d takeovers, %d device connections one after another; smallest gap between one's last request and the next one's first %s",
		takeovers, len(spans), gap)
}
