// Package lab is the failover lab: a 3-member etcd (the Debian binary), a
// mosquitto per bridge, a Modbus PLC behind a connection-counting proxy
// and three `leasebridge run` processes with second-scale timings. It runs
// rounds of fault trials (owner SIGKILL, owner SIGSTOP past lease_ttl then
// SIGCONT, one owner's broker path blackholed, etcd leader kill, etcd
// quorum loss and return, graceful SIGTERM), measures each failover from
// outside and from the successor's metric, compares both with the budget
// admission computed for that failure mode, and fails on any budget
// violation and on two device connections serving at once. It writes the
// results as docs/measured-failover.md (with LEASEBRIDGE_WRITE_DOCS=1; to a
// temporary file otherwise).
package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// Fault kinds, in the order each round runs them.
const (
	kindKill    = "owner SIGKILL"
	kindStop    = "owner SIGSTOP > lease_ttl, SIGCONT"
	kindBroker  = "owner broker path blackholed"
	kindLeader  = "etcd leader SIGKILL"
	kindQuorum  = "etcd quorum loss and return"
	kindSIGTERM = "owner SIGTERM (graceful)"
)

var kinds = []string{kindKill, kindStop, kindBroker, kindLeader, kindQuorum, kindSIGTERM}

// kindNames are the short names LEASEBRIDGE_LAB_KINDS selects kinds by.
var kindNames = map[string]string{"kill": kindKill, "stop": kindStop, "broker": kindBroker, "leader": kindLeader,
	"quorum": kindQuorum, "term": kindSIGTERM}

// defaultRounds gives 54 trials: the CI minimum is 50.
const defaultRounds = 9

// trial is one fault and what was measured.
type trial struct {
	N, Round int
	Kind     string
	Owner    string
	Succ     string
	Epoch    uint64 // the owner's epoch before the fault
	NewEpoch uint64 // the successor's; 0 when no failover happened
	// Failover is false when the lease stayed with its owner.
	Failover bool
	// BudgetName and Budget are the admitted bound this trial is held to.
	BudgetName string
	Budget     time.Duration
	// External is from the fault instant (for quorum loss: the instant
	// quorum returned) to the first value published with the new epoch,
	// as a subscriber on the brokers saw it.
	External time.Duration
	// Metric is the successor's FailureToFullDuration (/readyz).
	Metric time.Duration
	// Activation is the successor's "became owner" to ServiceLevelFull.
	Activation time.Duration
	// PeakOpen is the most device connections open at once during the
	// trial; PeakServing the most that sent requests over overlapping spans.
	PeakOpen, PeakServing int
	// FencedRequests counts requests that left the fenced owner after its
	// fence deadline (-1: not applicable).
	FencedRequests int64
	// CloseAfterCont is SIGCONT to the frozen owner's device socket closing.
	CloseAfterCont time.Duration
	// MaxGap is the longest pause in the owner's values (leader kill).
	MaxGap time.Duration
	// Outage is how long quorum was lost.
	Outage time.Duration
	// Stale counts values published with an older epoch after a newer one
	// was seen (consumers drop them by epoch).
	Stale int
	// Terms lists every "became owner" logged during the trial.
	Terms []string
	// FenceClose is quorum loss to the fenced owner's device socket closing.
	FenceClose time.Duration
	// Exit is how the faulted owner process ended; Fault names what was
	// done when it is not the owner's process.
	Exit, Fault string
	Errs        []string
}

func (tr *trial) fail(format string, args ...any) {
	tr.Errs = append(tr.Errs, fmt.Sprintf(format, args...))
}

type lab struct {
	t       *testing.T
	ctx     context.Context
	etcd    *testetcd.Cluster
	plc     *plcsim.PLC
	rec     *plcRecorder
	watch   *valueWatch
	bridges []*bridge
	report  admission.Report
	trials  []*trial
	began   time.Time
}

func TestFailoverLab(t *testing.T) {
	rounds := defaultRounds
	if s := os.Getenv("LEASEBRIDGE_LAB_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LEASEBRIDGE_LAB_ROUNDS=%q: want a positive integer", s)
		}
		rounds = n
	}
	run := kinds
	if s := os.Getenv("LEASEBRIDGE_LAB_KINDS"); s != "" {
		run = nil
		for _, name := range strings.Split(s, ",") {
			k, ok := kindNames[strings.TrimSpace(name)]
			if !ok {
				t.Fatalf("LEASEBRIDGE_LAB_KINDS=%q: unknown kind %q (kill, stop, broker, leader, quorum, term)", s, name)
			}
			run = append(run, k)
		}
	}
	l := startLab(t)
	for round := 1; round <= rounds; round++ {
		for _, kind := range run {
			tr := &trial{N: len(l.trials) + 1, Round: round, Kind: kind, FencedRequests: -1}
			l.trials = append(l.trials, tr)
			l.run(tr)
			for _, e := range tr.Errs {
				t.Errorf("trial %d (%s): %s", tr.N, tr.Kind, e)
			}
			t.Logf("trial %2d %-36s %s", tr.N, kind, tr.line())
			if t.Failed() && len(tr.Errs) > 0 {
				for _, b := range l.bridges {
					t.Logf("%s log tail:\n%s", b.name, b.tail(15))
				}
			}
		}
	}
	for _, o := range l.rec.overlaps() {
		t.Errorf("two device connections served at once: %s", o)
	}
	if t.Failed() {
		t.Logf("device connections:\n%s", l.rec.summary())
	}
	l.writeDoc()
	if dir := os.Getenv("LEASEBRIDGE_LAB_LOGDIR"); dir != "" {
		for _, b := range l.bridges {
			if data, err := os.ReadFile(b.logPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, b.name+".log"), data, 0o644)
			}
		}
	}
}

func startLab(t *testing.T) *lab {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	testbin.Leasebridge(t) // build before starting the clocks
	l := &lab{t: t, ctx: ctx, began: time.Now()}
	l.etcd = testetcd.StartBinary(t, 3)
	var err error
	if l.plc, err = plcsim.Start(ctx, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.plc.Close() })
	l.rec = recordPLC(ctx, l.plc.Proxy())
	eps := make([]string, 0, 3)
	for _, e := range l.etcd.Endpoints() {
		eps = append(eps, strconv.Quote(e))
	}
	dir := t.TempDir()
	var urls []string
	for i := range 3 {
		m := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
		px, err := faultproxy.Start(ctx, m.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		b := newBridge(t, dir, fmt.Sprintf("bridge-%c", 'a'+i), strings.Join(eps, ", "), l.plc.Addr(), m, px)
		l.bridges = append(l.bridges, b)
		urls = append(urls, m.URL)
	}
	l.report = l.bridges[0].report
	l.watch = watchValues(t, urls)
	for _, b := range l.bridges {
		b.start(t)
	}
	return l
}

// run runs one trial: settle to one serving owner and two standbys, inject
// the fault, measure.
func (l *lab) run(tr *trial) {
	owner, epoch, err := l.settle()
	if err != nil {
		tr.fail("settle: %v", err)
		return
	}
	tr.Owner, tr.Epoch = owner.name, epoch
	from := time.Now()
	switch tr.Kind {
	case kindKill:
		l.ownerKill(tr, owner)
	case kindStop:
		l.ownerStop(tr, owner)
	case kindBroker:
		l.brokerPath(tr, owner)
	case kindLeader:
		l.leaderKill(tr, owner)
	case kindQuorum:
		l.quorumLoss(tr, owner)
	case kindSIGTERM:
		l.sigterm(tr, owner)
	}
	to := time.Now()
	tr.PeakOpen = l.rec.peakOpen(from, to)
	tr.PeakServing = l.rec.peakServing(from, to)
	tr.Stale = l.watch.staleBetween(from, to)
	for _, b := range l.bridges {
		for _, e := range b.logEvents("became owner") {
			if !e.Time.Before(from) && !e.Time.After(to) {
				tr.Terms = append(tr.Terms, fmt.Sprintf("%s@%d", b.name, e.Epoch))
			}
		}
	}
	sort.Strings(tr.Terms)
	if tr.PeakServing > 1 {
		tr.fail("%d device connections sent requests at once", tr.PeakServing)
	}
	// Only a frozen owner may keep an (idle) socket open beside its
	// successor's; every running owner closes before anyone takes over.
	if tr.PeakOpen > 1 && tr.Kind != kindStop {
		tr.fail("%d device connections were open at once", tr.PeakOpen)
	}
	if tr.Failover && tr.Budget > 0 {
		if tr.External > tr.Budget {
			tr.fail("measured from outside %s > %s budget %s", fs(tr.External), tr.BudgetName, fs(tr.Budget))
		}
		if tr.Metric > tr.Budget {
			tr.fail("successor's FailureToFullDuration %s > %s budget %s", fs(tr.Metric), tr.BudgetName, fs(tr.Budget))
		}
	}
}

// settle restarts every ended process (as an orchestrator would), lifts
// every broker-path fault and waits for one owner at ServiceLevelFull whose
// values are reaching its broker and two answering standbys.
func (l *lab) settle() (*bridge, uint64, error) {
	for _, b := range l.bridges {
		if b.isFrozen() {
			_ = b.signal(syscall.SIGCONT)
		}
		if b.proxy.Mode() != faultproxy.Pass {
			if err := b.proxy.SetMode(faultproxy.Pass); err != nil {
				return nil, 0, err
			}
		}
		if !b.running() {
			b.start(l.t)
		}
	}
	limit := 2 * l.report.OwnerDeath.Total
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		var owner *bridge
		owners, standbys := 0, 0
		var states []string
		for _, b := range l.bridges {
			st, ok := b.status()
			states = append(states, fmt.Sprintf("%s:%v/%s/owner=%v/full=%v", b.name, ok, st.State, st.Owner, st.ServiceLevelFull))
			switch {
			case !ok:
			case st.Owner && st.ServiceLevelFull && st.State == "serving":
				owners++
				owner = b
			case !st.Owner && st.State == "standby":
				standbys++
			}
		}
		last = strings.Join(states, " ")
		if owners == 1 && standbys == 2 {
			a, ok := l.watch.latest()
			if ok && time.Since(a.At) < 250*time.Millisecond {
				// Let the standbys observe the owner's renewals for a
				// couple of rounds, as a standby in production would have.
				if err := sleepCtx(l.ctx, 2*l.report.Timing.RenewInterval); err != nil {
					return nil, 0, err
				}
				a, _ = l.watch.latest()
				if st, ok := owner.status(); ok && st.Owner && st.ServiceLevelFull {
					return owner, a.Epoch, nil
				}
			}
		}
		if err := sleepCtx(l.ctx, 50*time.Millisecond); err != nil {
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("no single serving owner with two standbys within %s: %s", fs(limit), last)
}

// takeover waits for the first value with an epoch above tr.Epoch and for
// the process that serves it, measuring from since.
func (l *lab) takeover(tr *trial, since time.Time, skip *bridge) {
	limit := 2*tr.Budget + 5*time.Second
	ctx, cancel := context.WithTimeout(l.ctx, limit)
	defer cancel()
	a, err := l.watch.waitAbove(ctx, tr.Epoch)
	if err != nil {
		tr.fail("no takeover within %s: %v", fs(limit), err)
		return
	}
	tr.Failover = true
	tr.NewEpoch = a.Epoch
	tr.External = a.At.Sub(since)
	succ, st, err := l.waitOwner(ctx, skip)
	if err != nil {
		tr.fail("successor: %v", err)
		return
	}
	tr.Succ = succ.name
	tr.Metric = time.Duration(st.FailureToFullNS)
	if act, ok := succ.activation(tr.NewEpoch); ok {
		tr.Activation = act
	} else {
		tr.fail("%s logged no activation for epoch %d", succ.name, tr.NewEpoch)
	}
}

// waitOwner waits for a process other than skip (nil: any) that owns the
// session at ServiceLevelFull.
func (l *lab) waitOwner(ctx context.Context, skip *bridge) (*bridge, failover.SessionStatus, error) {
	for {
		for _, b := range l.bridges {
			if b == skip {
				continue
			}
			if st, ok := b.status(); ok && st.Owner && st.ServiceLevelFull {
				return b, st, nil
			}
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, failover.SessionStatus{}, fmt.Errorf("no process reached ServiceLevelFull: %w", err)
		}
	}
}

func (l *lab) ownerDeath(tr *trial) {
	tr.BudgetName, tr.Budget = "owner_death", l.report.OwnerDeath.Total
}

// ownerKill: SIGKILL the owner; a standby takes over after lease_ttl.
func (l *lab) ownerKill(tr *trial, owner *bridge) {
	l.ownerDeath(tr)
	t0 := time.Now()
	if err := owner.signal(syscall.SIGKILL); err != nil {
		tr.fail("kill: %v", err)
		return
	}
	if _, _, err := owner.waitExit(5 * time.Second); err != nil {
		tr.fail("%v", err)
	}
	tr.Exit = "SIGKILL"
	l.takeover(tr, t0, owner)
}

// ownerStop freezes the owner past lease_ttl, lets a standby take over,
// then resumes it: the frozen owner's socket stays open while it is
// stopped, but no request may leave it after its fence deadline, and on
// SIGCONT it must close before any I/O.
func (l *lab) ownerStop(tr *trial, owner *bridge) {
	l.ownerDeath(tr)
	conn, ok := l.rec.serving()
	if !ok {
		tr.fail("no serving device connection before the freeze")
		return
	}
	t0 := time.Now()
	if err := owner.signal(syscall.SIGSTOP); err != nil {
		tr.fail("SIGSTOP: %v", err)
		return
	}
	tr.Fault = "SIGCONT after the takeover"
	// The last renew the owner sent successfully was sent before t0, so its
	// fence deadline is no later than this.
	fenceBy := t0.Add(l.report.FenceAfter)
	l.takeover(tr, t0, owner)
	// Stopped for longer than lease_ttl.
	if err := sleepCtx(l.ctx, time.Until(t0.Add(l.report.Timing.LeaseTTL+l.report.Timing.RenewInterval))); err != nil {
		return
	}
	fc := mustConn(l.rec, conn.ID)
	atFence := fc.at(fenceBy)
	tc := time.Now()
	if err := owner.signal(syscall.SIGCONT); err != nil {
		tr.fail("SIGCONT: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.report.OwnerDeath.Total)
	defer cancel()
	closed, err := l.rec.waitClosed(ctx, conn.ID)
	if err != nil {
		tr.fail("frozen owner did not close its device connection after SIGCONT: %v", err)
		return
	}
	tr.CloseAfterCont = closed.CloseAt.Sub(tc)
	final := closed.Ups[len(closed.Ups)-1]
	tr.FencedRequests = final.Requests - atFence.Requests
	if final.BytesUp != atFence.BytesUp || tr.FencedRequests != 0 {
		tr.fail("the frozen owner sent %d requests (%d bytes) to the PLC after its fence deadline", tr.FencedRequests, final.BytesUp-atFence.BytesUp)
	}
	// Resumed, it is a standby.
	deadline := time.Now().Add(l.report.OwnerDeath.Total)
	for {
		if st, ok := owner.status(); ok && !st.Owner {
			break
		}
		if time.Now().After(deadline) {
			tr.fail("resumed owner did not become a standby within %s", fs(l.report.OwnerDeath.Total))
			break
		}
		_ = sleepCtx(l.ctx, 20*time.Millisecond)
	}
}

func mustConn(r *plcRecorder, id int) connTrack {
	c, _ := r.conn(id)
	return c
}

// brokerPath blackholes the owner's path to its broker: it must step down
// (exit 75) and a standby takes the released lease.
func (l *lab) brokerPath(tr *trial, owner *bridge) {
	tr.BudgetName = "broker_path + detection"
	tr.Budget = l.report.BrokerPath.Total + mqtt.DetectionBound(testbin.KeepAlive)
	t0 := time.Now()
	if err := owner.proxy.SetMode(faultproxy.Blackhole); err != nil {
		tr.fail("blackhole: %v", err)
		return
	}
	l.takeover(tr, t0, owner)
	code, _, err := owner.waitExit(tr.Budget)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	tr.Exit = strconv.Itoa(code)
	if code != failover.ExitStepDown {
		tr.fail("owner exit status %d after its broker path was cut, want %d", code, failover.ExitStepDown)
	}
}

// leaderKill kills the etcd leader: the cluster elects another within a
// fraction of a renew round, so no failover may happen. Should the owner
// lose its lease anyway, the trial is held to the owner-death budget.
func (l *lab) leaderKill(tr *trial, owner *bridge) {
	tr.BudgetName = "no failover"
	ctx, cancel := context.WithTimeout(l.ctx, 20*time.Second)
	defer cancel()
	li, err := l.etcd.WaitLeader(ctx)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	t0 := time.Now()
	l.etcd.Kill(li)
	tr.Fault = fmt.Sprintf("etcd m%d killed", li)
	// Long enough for an owner that could not renew to pass its fence
	// deadline and for its successor to have taken over.
	pb, _ := admission.PollBoundary(l.report.Timing.AcquirePollInterval)
	window := l.report.Timing.LeaseTTL + 2*pb
	_ = sleepCtx(l.ctx, window)
	if st, ok := owner.status(); l.watch.highest() > tr.Epoch || !ok || !st.Owner || !st.ServiceLevelFull {
		l.ownerDeath(tr)
		l.takeover(tr, t0, nil)
	} else {
		tr.MaxGap = l.watch.maxGap(tr.Epoch, t0, t0.Add(window))
		tr.Succ = owner.name
	}
	l.etcd.Restart(li)
	if _, err := l.etcd.WaitLeader(ctx); err != nil {
		tr.fail("%v", err)
	}
	if err := l.waitMember(ctx, li); err != nil {
		tr.fail("restarted member: %v", err)
	}
}

// waitMember waits until member i answers its health check.
func (l *lab) waitMember(ctx context.Context, i int) error {
	u := l.etcd.Endpoints()[i] + "/health"
	for {
		resp, err := httpClient.Get(u)
		if err == nil {
			ok := resp.StatusCode == 200
			resp.Body.Close()
			if ok {
				return nil
			}
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("%s not healthy: %w", u, err)
		}
	}
}

// quorumLoss kills two of the three etcd members for longer than the
// owner's fence deadline, then restarts them. The owner cannot renew and
// fences itself: no request may leave it after its deadline. Once quorum
// returns a standby (or the fenced owner, which recognises its own row)
// takes over; that is measured from the restart of the two members against
// the owner-death budget, since nothing can fail over without a lease
// store.
func (l *lab) quorumLoss(tr *trial, owner *bridge) {
	l.ownerDeath(tr)
	ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
	defer cancel()
	li, err := l.etcd.WaitLeader(ctx)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	victims := []int{li, (li + 1) % 3}
	conn, _ := l.rec.serving()
	for _, i := range victims {
		l.etcd.Kill(i)
	}
	// No renew can land after this instant: its deadline is at most
	// FenceAfter later.
	q1 := time.Now()
	tr.Fault = fmt.Sprintf("etcd m%d, m%d killed", victims[0], victims[1])
	fenceBy := q1.Add(l.report.FenceAfter)
	_ = sleepCtx(l.ctx, l.report.Timing.LeaseTTL+l.report.Timing.RenewInterval)
	// Quorum returns when the members are started again: measuring from
	// here charges their start and the election to the failover.
	back := time.Now()
	tr.Outage = back.Sub(q1)
	for _, i := range victims {
		l.etcd.Restart(i)
	}
	if _, err := l.etcd.WaitLeader(ctx); err != nil {
		tr.fail("%v", err)
		return
	}
	l.takeover(tr, back, nil)
	c := mustConn(l.rec, conn.ID)
	if len(c.Ups) == 0 {
		tr.fail("no serving device connection before the quorum loss")
		return
	}
	if c.CloseAt.IsZero() {
		tr.fail("the fenced owner's device connection %d is still open", conn.ID)
	} else {
		tr.FenceClose = c.CloseAt.Sub(q1)
	}
	final := c.Ups[len(c.Ups)-1]
	atFence := c.at(fenceBy)
	tr.FencedRequests = final.Requests - atFence.Requests
	if tr.FencedRequests != 0 {
		tr.fail("the fenced owner sent %d requests after its fence deadline", tr.FencedRequests)
	}
	for _, i := range victims {
		if err := l.waitMember(ctx, i); err != nil {
			tr.fail("restarted member: %v", err)
		}
	}
}

// sigterm: the owner ends its term, releases the lease and exits 0; a
// standby takes the released row within two poll boundaries, two calls
// and its activation after the owner exited.
func (l *lab) sigterm(tr *trial, owner *bridge) {
	t0 := time.Now()
	if err := owner.signal(syscall.SIGTERM); err != nil {
		tr.fail("SIGTERM: %v", err)
		return
	}
	tm := l.report.Timing
	code, exitAt, err := owner.waitExit(l.report.CloseBound + 2*tm.RenewCallTimeout + 5*time.Second)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	tr.Exit = strconv.Itoa(code)
	if code != 0 {
		tr.fail("exit status %d after SIGTERM, want 0", code)
	}
	pb, _ := admission.PollBoundary(tm.AcquirePollInterval)
	tr.BudgetName = "release (exit + 2pb + 2C + A)"
	tr.Budget = exitAt.Sub(t0) + 2*pb + 2*tm.RenewCallTimeout + l.report.Activation
	l.takeover(tr, t0, owner)
}

// fs prints a duration in seconds with millisecond precision.
func fs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func (tr *trial) line() string {
	s := fmt.Sprintf("owner %s epoch %d", tr.Owner, tr.Epoch)
	if tr.Failover {
		s += fmt.Sprintf(" -> %s epoch %d: outside %s, metric %s, activation %s, budget %s %s",
			tr.Succ, tr.NewEpoch, fs(tr.External), fs(tr.Metric), fs(tr.Activation), tr.BudgetName, fs(tr.Budget))
	} else {
		s += fmt.Sprintf(": no failover, longest value gap %s", fs(tr.MaxGap))
	}
	s += fmt.Sprintf("; device conns open %d serving %d", tr.PeakOpen, tr.PeakServing)
	if tr.FencedRequests >= 0 {
		s += fmt.Sprintf("; requests after fence %d", tr.FencedRequests)
	}
	if tr.Kind == kindStop {
		s += fmt.Sprintf("; closed %s after SIGCONT", fs(tr.CloseAfterCont))
	}
	s += fmt.Sprintf("; terms %v", tr.Terms)
	if len(tr.Errs) > 0 {
		s += " FAIL"
	}
	return s
}

// docPath is where the table goes: the repository's docs with
// LEASEBRIDGE_WRITE_DOCS=1, a temporary file otherwise.
func (l *lab) docPath() string {
	if os.Getenv("LEASEBRIDGE_WRITE_DOCS") == "1" {
		return filepath.Join("..", "docs", "measured-failover.md")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("measured-failover-%d.md", os.Getpid()))
}
