// Package lab is the failover lab: a 3-member etcd (the Debian binary), a
// mosquitto per bridge, a Modbus PLC that logs every request it handles,
// behind a connection-counting proxy, and three `leasebridge run`
// processes with second-scale timings, each reaching every etcd member
// through its own fault proxy. It runs rounds of fault trials (owner
// SIGKILL, owner SIGSTOP past lease_ttl then SIGCONT, one owner's broker
// path blackholed, etcd leader kill, etcd quorum loss and return, graceful
// SIGTERM, the owner's store path blackholed, its store responses dropped
// or delayed, a store partition healed at 0.5x, 1x and 2x lease_ttl, and
// a rolling change of one node's lease_ttl followed by a fault), measures
// each failover from outside and from the successor's metric, compares
// both with the budget admission computed for that failure mode and
// configuration, and fails on any budget violation and on two clients at
// the device. After the rounds, a bridge route's owner is killed
// mid-stream on brokers of its own (lab/bridge_test.go), counting lost and
// duplicated messages. It writes the results as docs/measured-failover.md (with
// LEASEBRIDGE_WRITE_DOCS=1; to a temporary file otherwise).
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
	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// Fault kinds' labels, in the order each round runs them.
const (
	kindKill      = "owner SIGKILL"
	kindStop      = "owner SIGSTOP > lease_ttl, SIGCONT"
	kindBroker    = "owner broker path blackholed"
	kindLeader    = "etcd leader SIGKILL"
	kindQuorum    = "etcd quorum loss and return"
	kindSIGTERM   = "owner SIGTERM (graceful)"
	kindPartition = "owner store path blackholed"
	kindDrop      = "owner store responses dropped"
	kindDelay     = "owner store responses delayed 1.5-2x renew_call_timeout"
	kindRollShort = "rolling change: a standby restarted with a shorter lease_ttl, then owner store path blackholed"
	kindRollLong  = "rolling change: a node restarted with a longer lease_ttl takes the lease, then its store path blackholed"
)

// healFactors are the partition lengths, in lease_ttl, of the heal kind's
// rounds; delayFactors the response delays, in renew_call_timeout, of the
// delay kind's rounds. A delay of exactly renew_call_timeout races the
// call's own timer (a renew sent after the fault may still be taken as
// acknowledged), so the shortest is 1.5x: 100 ms of scheduling slack at
// the lab's timing.
var (
	healFactors  = []float64{0.5, 1, 2}
	delayFactors = []float64{1.5, 1.75, 2}
)

func healKind(f float64) string {
	return fmt.Sprintf("owner store path blackholed, healed at %gx lease_ttl", f)
}

// kind is one fault kind: its LEASEBRIDGE_LAB_KINDS name, its label in
// round r, and what it does to the settled owner.
type kind struct {
	short string
	label func(round int) string
	run   func(l *lab, tr *trial, owner *bridge)
}

func fixed(label string) func(int) string { return func(int) string { return label } }

// kinds in the order each round runs them.
var kinds = []kind{
	{"kill", fixed(kindKill), (*lab).ownerKill},
	{"stop", fixed(kindStop), (*lab).ownerStop},
	{"broker", fixed(kindBroker), (*lab).brokerPath},
	{"leader", fixed(kindLeader), (*lab).leaderKill},
	{"quorum", fixed(kindQuorum), (*lab).quorumLoss},
	{"term", fixed(kindSIGTERM), (*lab).sigterm},
	{"partition", fixed(kindPartition), (*lab).storePartition},
	{"drop", fixed(kindDrop), (*lab).storeDrop},
	{"delay", fixed(kindDelay), (*lab).storeDelay},
	{"heal", func(r int) string { return healKind(healFactors[(r-1)%len(healFactors)]) }, (*lab).storeHeal},
	{"rollshort", fixed(kindRollShort), (*lab).rollShort},
	{"rolllong", fixed(kindRollLong), (*lab).rollLong},
}

// defaultRounds gives 12 x 9 = 108 trials: the CI minimum is 100.
const defaultRounds = 9

// trial is one fault and what was measured.
type trial struct {
	N, Round int
	// Kind is the label (with its variant); Short the kind's name.
	Kind, Short string
	Owner       string
	Succ        string
	Epoch       uint64 // the owner's epoch before the fault
	NewEpoch    uint64 // the successor's; 0 when no failover happened
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
	// trial; PeakServing the most that sent requests over overlapping
	// spans, as the device's proxy saw them.
	PeakOpen, PeakServing int
	// OldConn is the device connection that served before the fault;
	// NewConn the first to serve after it. DeviceGap is the device's idle
	// time between OldConn's last request and NewConn's first.
	OldConn, NewConn int
	DeviceGap        time.Duration
	// TwoClients is set when the device's log shows the old owner's
	// connection sending after the successor's first request.
	TwoClients bool
	// OwnerTTL and SuccTTL are the lease_ttls the owner and its successor
	// ran with (they differ in a rolling change).
	OwnerTTL, SuccTTL time.Duration
	// FenceBy is the latest instant the old owner's fence deadline can be
	// (zero: not applicable); FencedRequests counts the requests the device
	// logged from OldConn after it (-1: not applicable).
	FenceBy        time.Time
	FencedRequests int64
	// CloseAfterCont is SIGCONT to the frozen owner's device socket closing.
	CloseAfterCont time.Duration
	// MaxGap is the longest pause in the owner's values (no failover).
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
	// Settle is how long the reset before the fault took; Took the fault
	// and its checks.
	Settle, Took time.Duration
}

func (tr *trial) fail(format string, args ...any) {
	tr.Errs = append(tr.Errs, fmt.Sprintf(format, args...))
}

func (tr *trial) note(format string, args ...any) {
	if tr.Fault != "" {
		tr.Fault += "; "
	}
	tr.Fault += fmt.Sprintf(format, args...)
}

type lab struct {
	t       *testing.T
	ctx     context.Context
	etcd    *testetcd.Cluster
	dev     *device
	rec     *plcRecorder
	watch   *valueWatch
	bridges []*bridge
	report  admission.Report
	trials  []*trial
	// bridgeRuns are the bridge-route trials.
	bridgeRuns []*bridgeRun
	began      time.Time
	// loadStart is the load average when the lab started.
	loadStart string
}

// selectKinds reads LEASEBRIDGE_LAB_KINDS.
func selectKinds(t *testing.T) []kind {
	s := os.Getenv("LEASEBRIDGE_LAB_KINDS")
	if s == "" {
		return kinds
	}
	var names []string
	byName := map[string]kind{}
	for _, k := range kinds {
		names = append(names, k.short)
		byName[k.short] = k
	}
	var run []kind
	for _, name := range strings.Split(s, ",") {
		if strings.TrimSpace(name) == bridgeKind {
			continue
		}
		k, ok := byName[strings.TrimSpace(name)]
		if !ok {
			t.Fatalf("LEASEBRIDGE_LAB_KINDS=%q: unknown kind %q (%s, %s)", s, name, strings.Join(names, ", "), bridgeKind)
		}
		run = append(run, k)
	}
	return run
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
	run := selectKinds(t)
	l := startLab(t)
	for round := 1; round <= rounds; round++ {
		for _, k := range run {
			tr := &trial{N: len(l.trials) + 1, Round: round, Kind: k.label(round), Short: k.short, FencedRequests: -1}
			l.trials = append(l.trials, tr)
			l.run(tr, k)
			for _, e := range tr.Errs {
				t.Errorf("trial %d (%s): %s", tr.N, tr.Kind, e)
			}
			t.Logf("trial %2d %-40s %s", tr.N, k.short, tr.line())
			if t.Failed() && len(tr.Errs) > 0 {
				for _, b := range l.bridges {
					t.Logf("%s log tail:\n%s", b.name, b.tail(15))
				}
			}
		}
	}
	if bridgeSelected() {
		l.runBridgeTrials()
	}
	all := l.dev.conns(time.Time{})
	if c, ok := find(all, 0); ok {
		t.Errorf("%d requests the device logged match no proxied connection (first from %s at %s)", c.N, c.First.Client, clock(c.First.At))
	}
	for _, o := range overlaps(all) {
		t.Errorf("%s", o)
	}
	for _, o := range l.rec.overlaps() {
		t.Errorf("two device connections served at once (proxy view): %s", o)
	}
	if t.Failed() {
		t.Logf("device connections (proxy view):\n%s", l.rec.summary())
		t.Logf("device request log by connection:\n%s", l.dev.summary())
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
	l := &lab{t: t, ctx: ctx, began: time.Now(), loadStart: loadAverage()}
	l.etcd = testetcd.StartBinary(t, 3)
	l.dev = startDevice(ctx, t)
	l.rec = recordPLC(ctx, l.dev.proxy)
	dir := t.TempDir()
	var urls []string
	for i := range 3 {
		m := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
		px, err := faultproxy.Start(ctx, m.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		b := newBridge(t, dir, fmt.Sprintf("bridge-%c", 'a'+i), startStorePath(ctx, t, l.etcd.Endpoints()), l.dev.Addr(), m, px)
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
func (l *lab) run(tr *trial, k kind) {
	begin := time.Now()
	owner, epoch, err := l.settle()
	if err != nil {
		tr.fail("settle: %v", err)
		return
	}
	tr.Owner, tr.Epoch = owner.name, epoch
	from := time.Now()
	tr.OldConn = l.dev.lastBefore(from)
	tr.Settle = from.Sub(begin)
	k.run(l, tr, owner)
	to := time.Now()
	tr.Took = to.Sub(from)
	tr.PeakOpen = l.rec.peakOpen(from, to)
	tr.PeakServing = l.rec.peakServing(from, to)
	tr.Stale = l.watch.staleBetween(from, to)
	// Every term that published during the trial has logged its start, or
	// will: wait for the lines before listing the terms.
	ctx, cancel := context.WithTimeout(l.ctx, l.report.OwnerDeath.Total)
	for _, e := range l.watch.epochsAbove(tr.Epoch, from, to) {
		if _, err := l.waitTerm(ctx, e); err != nil {
			tr.fail("%v", err)
		}
	}
	cancel()
	for _, b := range l.bridges {
		for _, e := range b.logEvents("became owner") {
			if !e.Time.Before(from) && !e.Time.After(to) {
				tr.Terms = append(tr.Terms, fmt.Sprintf("%s@%d", b.name, e.Epoch))
			}
		}
	}
	sort.Strings(tr.Terms)
	l.witness(tr)
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

// witness judges a trial by the device's own request log: after a
// takeover, the old owner's connection's last request strictly precedes
// the successor's first, and no request of the old owner's connection
// reached the device after its fence deadline.
func (l *lab) witness(tr *trial) {
	if tr.OldConn == 0 {
		tr.fail("the device logged no request before the fault")
		return
	}
	cs := l.dev.conns(tr.FenceBy)
	if !tr.FenceBy.IsZero() {
		old, _ := find(cs, tr.OldConn)
		tr.FencedRequests = int64(old.After)
		if old.After > 0 {
			tr.fail("the device logged %d requests from the old owner's connection %d after its fence deadline %s (last at %s)",
				old.After, tr.OldConn, clock(tr.FenceBy), clock(old.Last.At))
		}
	}
	if !tr.Failover {
		return
	}
	next, gap, err := handover(cs, tr.OldConn)
	tr.NewConn, tr.DeviceGap = next.Conn, gap
	if err != nil {
		tr.fail("%v", err)
		tr.TwoClients = next.Conn != 0
		if tr.TwoClients && tr.OwnerTTL != tr.SuccTTL {
			tr.fail("%s", mixedVerdict(tr))
		}
	}
}

// settle lifts every broker-path and store-path fault, restarts every
// ended process (as an orchestrator would, also while it waits) and waits
// for one owner at ServiceLevelFull whose values are reaching its broker
// and every other bridge answering as a standby.
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
		if err := b.store.set(faultproxy.Pass, 0); err != nil {
			return nil, 0, err
		}
	}
	limit := 2 * l.report.OwnerDeath.Total
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		for _, b := range l.bridges {
			if !b.running() {
				b.start(l.t)
			}
		}
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
		if owners == 1 && standbys == len(l.bridges)-1 {
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
	return nil, 0, fmt.Errorf("no single serving owner with %d standbys within %s: %s", len(l.bridges)-1, fs(limit), last)
}

// takeover waits for the first value with an epoch above tr.Epoch, for
// the process that logged that term's activation and for its /readyz,
// measuring from since. Every wait ends at twice the trial's budget.
func (l *lab) takeover(tr *trial, since time.Time) {
	limit := 2 * tr.Budget
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
	succ, err := l.waitTerm(ctx, a.Epoch)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	tr.Succ = succ.name
	tr.Activation, _ = succ.activation(a.Epoch)
	var st failover.SessionStatus
	if err := poll(ctx, func() bool {
		var ok bool
		st, ok = succ.status()
		return ok && st.Owner && st.ServiceLevelFull
	}); err != nil {
		tr.fail("%s logged epoch %d at ServiceLevelFull but /readyz never said so: %v", succ.name, a.Epoch, err)
		return
	}
	tr.Metric = time.Duration(st.FailureToFullNS)
}

// waitTerm waits until a process has logged both "became owner" and
// "ServiceLevelFull" for epoch: a loaded machine may write the lines
// well after the values reached the broker.
func (l *lab) waitTerm(ctx context.Context, epoch uint64) (*bridge, error) {
	var succ *bridge
	err := poll(ctx, func() bool {
		for _, b := range l.bridges {
			if b.logged("became owner", epoch) && b.logged("ServiceLevelFull", epoch) {
				succ = b
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no bridge logged \"became owner\" and \"ServiceLevelFull\" for epoch %d: %w", epoch, err)
	}
	return succ, nil
}

// waitOwner waits until b owns the session at ServiceLevelFull.
func (l *lab) waitOwner(ctx context.Context, b *bridge) error {
	if err := poll(ctx, func() bool {
		st, ok := b.status()
		return ok && st.Owner && st.ServiceLevelFull
	}); err != nil {
		return fmt.Errorf("%s did not reach ServiceLevelFull: %w", b.name, err)
	}
	return nil
}

// waitStandby waits until b answers as a standby.
func (l *lab) waitStandby(ctx context.Context, b *bridge) error {
	if err := poll(ctx, func() bool {
		st, ok := b.status()
		return ok && !st.Owner && st.State == "standby"
	}); err != nil {
		return fmt.Errorf("%s did not become a standby: %w", b.name, err)
	}
	return nil
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
	if _, _, err := owner.waitExit(l.report.OwnerDeath.Total); err != nil {
		tr.fail("%v", err)
	}
	tr.Exit = "SIGKILL"
	l.takeover(tr, t0)
}

// ownerStop freezes the owner past lease_ttl, lets a standby take over,
// then resumes it: the frozen owner's socket stays open while it is
// stopped, but no request may leave it after its fence deadline, and on
// SIGCONT it must close before any I/O.
func (l *lab) ownerStop(tr *trial, owner *bridge) {
	l.ownerDeath(tr)
	t0 := time.Now()
	if err := owner.signal(syscall.SIGSTOP); err != nil {
		tr.fail("SIGSTOP: %v", err)
		return
	}
	tr.Fault = "SIGCONT after the takeover"
	// The last renew the owner sent successfully was sent before t0, so its
	// fence deadline is no later than this.
	tr.FenceBy = t0.Add(owner.report.FenceAfter)
	l.takeover(tr, t0)
	// Stopped for longer than lease_ttl.
	if err := sleepCtx(l.ctx, time.Until(t0.Add(l.report.Timing.LeaseTTL+l.report.Timing.RenewInterval))); err != nil {
		return
	}
	tc := time.Now()
	if err := owner.signal(syscall.SIGCONT); err != nil {
		tr.fail("SIGCONT: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.report.OwnerDeath.Total)
	defer cancel()
	closed, err := l.rec.waitClosed(ctx, tr.OldConn)
	if err != nil {
		tr.fail("frozen owner did not close its device connection after SIGCONT: %v", err)
		return
	}
	tr.CloseAfterCont = closed.CloseAt.Sub(tc)
	// Resumed, it is a standby.
	if err := l.waitStandby(ctx, owner); err != nil {
		tr.fail("resumed owner: %v", err)
	}
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
	l.takeover(tr, t0)
	code, _, err := owner.waitExit(tr.Budget)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	tr.Exit = strconv.Itoa(code)
	if code != exitcode.StepDown {
		tr.fail("owner exit status %d after its broker path was cut, want %d", code, exitcode.StepDown)
	}
}

// failoverOrNot waits long enough after t0 for an owner that could not
// renew to pass its fence deadline and for its successor to take over. If
// the owner kept its lease the trial records the longest pause in its
// values; otherwise the takeover is held to the owner-death budget.
func (l *lab) failoverOrNot(tr *trial, owner *bridge, t0 time.Time) {
	pb, _ := admission.PollBoundary(l.report.Timing.AcquirePollInterval)
	window := l.report.Timing.LeaseTTL + 2*pb
	_ = sleepCtx(l.ctx, time.Until(t0.Add(window)))
	if st, ok := owner.status(); l.watch.highest() > tr.Epoch || !ok || !st.Owner || !st.ServiceLevelFull {
		l.ownerDeath(tr)
		l.takeover(tr, t0)
		return
	}
	tr.MaxGap = l.watch.maxGap(tr.Epoch, t0, t0.Add(window))
	tr.Succ = owner.name
}

// leaderKill kills the etcd leader: the cluster elects another within a
// fraction of a renew round, so no failover may happen. Should the owner
// lose its lease anyway, the trial is held to the owner-death budget.
func (l *lab) leaderKill(tr *trial, owner *bridge) {
	tr.BudgetName = "no failover"
	ctx, cancel := context.WithTimeout(l.ctx, l.report.OwnerDeath.Total)
	defer cancel()
	li, err := l.etcd.WaitLeader(ctx)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	t0 := time.Now()
	l.etcd.Kill(li)
	tr.Fault = fmt.Sprintf("etcd m%d killed", li)
	l.failoverOrNot(tr, owner, t0)
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
		if err := sleepCtx(ctx, pollEvery); err != nil {
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
	ctx, cancel := context.WithTimeout(l.ctx, 2*l.report.OwnerDeath.Total)
	defer cancel()
	li, err := l.etcd.WaitLeader(ctx)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	victims := []int{li, (li + 1) % 3}
	for _, i := range victims {
		l.etcd.Kill(i)
	}
	// No renew can land after this instant: its deadline is at most
	// FenceAfter later.
	q1 := time.Now()
	tr.Fault = fmt.Sprintf("etcd m%d, m%d killed", victims[0], victims[1])
	tr.FenceBy = q1.Add(owner.report.FenceAfter)
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
	l.takeover(tr, back)
	if c, err := l.rec.waitClosed(ctx, tr.OldConn); err != nil {
		tr.fail("the fenced owner's device connection: %v", err)
	} else {
		tr.FenceClose = c.CloseAt.Sub(q1)
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
	code, exitAt, err := owner.waitExit(l.report.OwnerDeath.Total)
	if err != nil {
		tr.fail("%v", err)
		return
	}
	tr.Exit = strconv.Itoa(code)
	if code != 0 {
		tr.fail("exit status %d after SIGTERM, want 0", code)
	}
	tr.BudgetName = "release (exit + 2pb + 2C + A)"
	tr.Budget = exitAt.Sub(t0) + l.releaseBudget()
	l.takeover(tr, t0)
}

// releaseBudget is what a standby needs after a release landed: two poll
// boundaries, two calls and its activation.
func (l *lab) releaseBudget() time.Duration {
	tm := l.report.Timing
	pb, _ := admission.PollBoundary(tm.AcquirePollInterval)
	return 2*pb + 2*tm.RenewCallTimeout + l.report.Activation
}

// fs prints a duration in seconds with millisecond precision.
func fs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func (tr *trial) line() string {
	s := fmt.Sprintf("owner %s epoch %d", tr.Owner, tr.Epoch)
	if tr.Failover {
		s += fmt.Sprintf(" -> %s epoch %d: outside %s, metric %s, activation %s, budget %s %s; device conn %d -> %d idle %s",
			tr.Succ, tr.NewEpoch, fs(tr.External), fs(tr.Metric), fs(tr.Activation), tr.BudgetName, fs(tr.Budget),
			tr.OldConn, tr.NewConn, fs(tr.DeviceGap))
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
	if tr.Fault != "" {
		s += "; " + tr.Fault
	}
	s += fmt.Sprintf("; terms %v; settle %s, trial %s", tr.Terms, fs(tr.Settle), fs(tr.Took))
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
