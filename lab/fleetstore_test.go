package lab

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/lease/fleetstore"
)

// fleetRegime is the store members' raft timing; zero durations leave
// the keys out of the file, so the members run etcd's defaults.
type fleetRegime struct {
	Name                string
	Heartbeat, Election time.Duration
}

// fleetRegimes: a fast election that lease_ttl's observation calls
// already cover (store_recovery 0 at the lab's timing), and etcd's
// default timing, whose election admission charges as store_recovery.
var fleetRegimes = []fleetRegime{
	{Name: "fast", Heartbeat: 50 * time.Millisecond, Election: 300 * time.Millisecond},
	{Name: "etcd defaults"},
}

// fleetTopology is who runs a member: every gateway runs `store` and
// `run`; a witness runs only `store`, with no routes.
type fleetTopology struct {
	Name     string
	Gateways int
	Witness  bool
}

var fleetTopologies = []fleetTopology{
	{Name: "3 gateways", Gateways: 3},
	{Name: "2 gateways + witness", Gateways: 2, Witness: true},
}

// defaultFleetTrials is the node kills per topology and regime, 10 per
// topology: the issue asks for at least 10, and the lab's own rounds
// already take most of the CI's time. LEASEBRIDGE_FLEET_TRIALS changes
// it.
const defaultFleetTrials = 5

// The fleet-store trials' labels.
const (
	kindNodeKill    = "the owner's node SIGKILLed (bridge and member) while its member leads"
	kindMemberKill  = "the owner's member SIGKILLed while it leads, its bridge running"
	kindWitnessKill = "the witness SIGKILLed while it leads"
	kindFleetQuorum = "two of three members SIGKILLed past the owner's fence deadline, then started again, every bridge running"
)

// fleetRun is one topology and regime: its admitted budget and trials.
type fleetRun struct {
	Topology fleetTopology
	Regime   fleetRegime
	// Budget, Recovery and Election are the owner-death budget, its
	// store_recovery term and the store election bound E, as `leasebridge
	// admit --format json` printed them for the gateways' file.
	Budget, Recovery, Election time.Duration
	// Timing is the lease timing the bridges run with.
	Timing admission.Timing
	Trials []*trial
	// Overlaps are the pairs of device connections whose requests
	// interleaved in the device's log over the whole run.
	Overlaps int
	// Rejoin are the killed members' restart-to-caught-up times.
	Rejoin []time.Duration
}

// member is one `leasebridge store` process slot.
type member struct {
	*proc
	cfgPath   string
	clientURL string
	cli       *clientv3.Client
	id        uint64 // etcd's member id, learnt from its status
}

// fleetLab is the failover lab with the lease store run by the fleet's
// own `leasebridge store` processes instead of an etcd binary.
type fleetLab struct {
	*lab
	res     *fleetRun
	members []*member // the gateways' in bridge order, then the witness's
}

// TestFleetStoreOwnerNodeKill runs, for each topology and regime, a fleet
// on loopback whose only lease store is its own `leasebridge store`
// processes (TLS, client certificates from a fleet CA), and kills the
// owner's node (its `run` and its `store`, SIGKILL) while the owner's
// member is the store's leader. Every successor must serve within the
// owner-death budget `leasebridge admit --format json` printed for the
// file, and the device's request log must show no two clients. The
// killed node is started again and its member caught up before the next
// trial. With LEASEBRIDGE_WRITE_DOCS=1 and every run selected, the
// results are the fleet-store section of docs/measured-failover.md.
func TestFleetStoreOwnerNodeKill(t *testing.T) {
	n := defaultFleetTrials
	if s := os.Getenv("LEASEBRIDGE_FLEET_TRIALS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("LEASEBRIDGE_FLEET_TRIALS=%q: want a positive integer", s)
		}
		n = v
	}
	testbin.Leasebridge(t) // build before starting the clocks
	began, load := time.Now(), loadAverage()
	var runs []*fleetRun
	for _, topo := range fleetTopologies {
		for _, rg := range fleetRegimes {
			name := strings.ReplaceAll(topo.Name+"/"+rg.Name, " ", "_")
			t.Run(name, func(t *testing.T) {
				r := &fleetRun{Topology: topo, Regime: rg}
				runFleet(t, r, n)
				runs = append(runs, r)
			})
		}
	}
	for _, r := range runs {
		t.Logf("%s, %s: budget %s (store_recovery %s), takeover %s, %d overlaps", r.Topology.Name, r.Regime.Name,
			fs(r.Budget), fs(r.Recovery), r.takeoverText(), r.Overlaps)
	}
	if len(runs) == len(fleetTopologies)*len(fleetRegimes) && !t.Failed() {
		writeFleetDoc(t, runs, began, load)
	}
}

// runFleet starts one topology and regime and runs its trials: n node
// kills, then the member, witness and quorum-loss kinds.
func runFleet(t *testing.T, r *fleetRun, n int) {
	f := startFleetLab(t, r)
	for _, k := range f.kinds(n) {
		for range k.n {
			tr := &trial{N: len(f.trials) + 1, Round: len(f.trials) + 1, Kind: k.label(0), Short: k.short, FencedRequests: -1}
			f.trials = append(f.trials, tr)
			f.lab.run(tr, k.kind)
			for _, e := range tr.Errs {
				t.Errorf("trial %d (%s): %s", tr.N, k.short, e)
			}
			t.Logf("trial %2d %-11s %s", tr.N, k.short, tr.line())
			if len(tr.Errs) > 0 {
				f.logTails()
			}
		}
	}
	all := f.dev.conns(time.Time{})
	dev := overlaps(all)
	for _, o := range dev {
		t.Errorf("%s", o)
	}
	for _, o := range f.rec.overlaps() {
		t.Errorf("two device connections served at once (proxy view): %s", o)
	}
	if c, ok := find(all, 0); ok {
		t.Errorf("%d requests the device logged match no proxied connection (first from %s at %s)", c.N, c.First.Client, clock(c.First.At))
	}
	r.Trials, r.Overlaps = f.trials, len(dev)
}

// countedKind is a fault kind and how many trials of it a run makes.
type countedKind struct {
	kind
	n int
}

// kinds are the run's fault kinds: n node kills, then a fifth as many
// (at least one) member kills, as many witness kills when there is a
// witness, and as many quorum losses.
func (f *fleetLab) kinds(n int) []countedKind {
	extra := max(1, n/5)
	k := func(short, label string, n int, run func(tr *trial, owner *bridge)) countedKind {
		return countedKind{kind{short, fixed(label), func(_ *lab, tr *trial, owner *bridge) {
			if f.revive(tr) {
				run(tr, owner)
			}
		}}, n}
	}
	ks := []countedKind{
		k("nodekill", kindNodeKill, n, f.nodeKill),
		k("memberkill", kindMemberKill, extra, func(tr *trial, owner *bridge) { f.memberKill(tr, owner, false) }),
	}
	if f.res.Topology.Witness {
		ks = append(ks, k("witnesskill", kindWitnessKill, extra, func(tr *trial, owner *bridge) { f.memberKill(tr, owner, true) }))
	}
	return append(ks, k("quorum", kindFleetQuorum, extra, f.quorumLoss))
}

// revive starts every member a failed trial left ended and waits until
// it has caught up, so that one failure does not fail every later trial.
func (f *fleetLab) revive(tr *trial) bool {
	for _, m := range f.members {
		if !m.running() && !f.restartMember(tr, m) {
			return false
		}
	}
	return true
}

// logTails logs the end of every process's log, for a failed trial.
func (f *fleetLab) logTails() {
	for _, b := range f.bridges {
		f.t.Logf("%s log tail:\n%s", b.name, b.tail(15))
	}
	for _, m := range f.members {
		f.t.Logf("%s log tail:\n%s", m.name, m.tail(10))
	}
}

// startFleetLab lays out the members on loopback with a fleet CA, starts
// every `store` process and waits for the cluster, admits the gateways'
// file with the binary, then starts the device, one mosquitto per
// gateway and every `run` process.
func startFleetLab(t *testing.T, r *fleetRun) *fleetLab {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l := &lab{t: t, ctx: ctx, began: time.Now(), loadStart: loadAverage()}
	f := &fleetLab{lab: l, res: r}
	dir := t.TempDir()
	ca := testetcd.NewCA(t, "fleet")
	names := make([]string, 0, 3)
	for i := range r.Topology.Gateways {
		names = append(names, fmt.Sprintf("gw%d", i))
	}
	if r.Topology.Witness {
		names = append(names, "witness")
	}
	var list string
	for _, name := range names {
		m := &member{proc: newProc(t, name+"-store", filepath.Join(dir, name+"-store.log")), clientURL: "https://" + testbin.FreeAddr(t)}
		list += fmt.Sprintf("    - {name: %s, peer_url: \"https://%s\", client_url: \"%s\"}\n", name, testbin.FreeAddr(t), m.clientURL)
		f.members = append(f.members, m)
	}
	block := func(node string) string { return storeBlock(dir, node, ca.Issue(node), r.Regime, list) }
	l.dev = startDevice(ctx, t)
	l.rec = recordPLC(ctx, l.dev.proxy)
	var urls []string
	for i := range r.Topology.Gateways {
		b := f.gateway(dir, names[i], block(names[i]))
		f.members[i].cfgPath = b.cfgPath
		urls = append(urls, b.broker.URL)
	}
	if r.Topology.Witness {
		w := f.members[len(f.members)-1]
		w.cfgPath = filepath.Join(dir, "witness.yaml")
		if err := os.WriteFile(w.cfgPath, []byte("deployment_mode: clustered\nnode: witness\n"+block("witness")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.admit()
	f.connect(ca.Issue("lab"))
	for _, m := range f.members {
		m.startStore(t)
	}
	if err := f.waitCluster(); err != nil {
		t.Fatal(err)
	}
	l.report = l.bridges[0].report
	r.Timing = l.report.Timing
	l.watch = watchValues(t, urls)
	for _, b := range l.bridges {
		b.start(t)
	}
	return f
}

// storeBlock is node's data_dir and lease_store block: its member
// certificate, the regime's raft timing and the member list.
func storeBlock(dir, node string, c testetcd.TLSFiles, rg fleetRegime, list string) string {
	timing := ""
	if rg.Heartbeat > 0 {
		timing = fmt.Sprintf("  heartbeat_interval: %s\n  election_timeout: %s\n", rg.Heartbeat, rg.Election)
	}
	return fmt.Sprintf("data_dir: %s\nlease_store:\n  key_prefix: /lab/\n  member_tls: {ca_file: %s, cert_file: %s, key_file: %s}\n%s  members:\n%s",
		filepath.Join(dir, node), c.CAFile, c.CertFile, c.KeyFile, timing, list)
}

// gateway lays out one gateway's bridge: its own mosquitto behind a fault
// proxy, and the shared configuration with lease_store replaced by the
// fleet's members.
func (f *fleetLab) gateway(dir, name, block string) *bridge {
	m := testmqtt.StartMosquitto(f.t, testmqtt.MosquittoConfig{})
	px, err := faultproxy.Start(f.ctx, m.Addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = px.Close() })
	b := newSlot(f.t, dir, name, nil, m, px)
	b.spec = testbin.Bridge{Broker: "tcp://" + px.Addr(), PLC: f.dev.Addr(), Node: name, HTTP: b.http, KeyPrefix: "/lab/", Topic: "lab/{device}/{tag}"}
	y := testbin.Config(b.spec)
	old := "lease_store: {endpoints: [], key_prefix: /lab/}\n"
	if strings.Count(y, old) != 1 {
		f.t.Fatalf("the shared configuration has no single %q to replace", old)
	}
	b.yaml = strings.Replace(y, old, block, 1)
	if err := b.configure(0); err != nil {
		f.t.Fatal(err)
	}
	f.bridges = append(f.bridges, b)
	return b
}

// admitJSON is the part of `leasebridge admit --format json` the lab
// reads.
type admitJSON struct {
	Admitted bool `json:"admitted"`
	Sessions []struct {
		OwnerDeath    time.Duration `json:"owner_death_ns"`
		StoreElection time.Duration `json:"store_election_ns"`
		Terms         struct {
			OwnerDeath map[string]time.Duration `json:"owner_death"`
		} `json:"terms"`
	} `json:"sessions"`
}

// admit runs `leasebridge admit --format json` on every gateway's file:
// each must be admitted with one owner-death budget that has a
// store_recovery term, the same for every gateway and the same as the
// lab's own admission of the file, and that term must be zero exactly in
// the fast regime.
func (f *fleetLab) admit() {
	t := f.t
	for i, b := range f.bridges {
		out, err := exec.Command(testbin.Leasebridge(t), "admit", "-c", b.cfgPath, "--format", "json").Output()
		var doc admitJSON
		if jerr := json.Unmarshal(out, &doc); err != nil || jerr != nil || !doc.Admitted || len(doc.Sessions) != 1 {
			t.Fatalf("admit --format json -c %s: %v %v\n%s", b.cfgPath, err, jerr, out)
		}
		s := doc.Sessions[0]
		rec, ok := s.Terms.OwnerDeath["store_recovery"]
		if !ok {
			t.Fatalf("admit -c %s: the owner-death budget has no store_recovery term: %v", b.cfgPath, s.Terms.OwnerDeath)
		}
		if i > 0 && (s.OwnerDeath != f.res.Budget || rec != f.res.Recovery) {
			t.Fatalf("admit -c %s: owner death %s (store_recovery %s), but %s's is %s (%s)", b.cfgPath, fs(s.OwnerDeath), fs(rec),
				f.bridges[0].name, fs(f.res.Budget), fs(f.res.Recovery))
		}
		f.res.Budget, f.res.Recovery, f.res.Election = s.OwnerDeath, rec, s.StoreElection
		if s.OwnerDeath != b.report.OwnerDeath.Total {
			t.Fatalf("admit -c %s printed owner death %s, the lab's admission of the same file %s", b.cfgPath, fs(s.OwnerDeath), fs(b.report.OwnerDeath.Total))
		}
	}
	if fast := f.res.Regime.Heartbeat > 0; fast != (f.res.Recovery == 0) {
		t.Fatalf("%s regime: store_recovery %s (E %s); the regimes are chosen so that only the fast one's is zero", f.res.Regime.Name, fs(f.res.Recovery), fs(f.res.Election))
	}
}

// connect opens one etcd client per member, with a certificate from the
// fleet CA: the lab asks each member for its status and the leader to
// hand its leadership over.
func (f *fleetLab) connect(c testetcd.TLSFiles) {
	tc, err := fleetstore.ClientTLS(&fleetstore.TLSFiles{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range f.members {
		m.cli = newClient(f.t, m.clientURL, tc)
	}
}

func newClient(t *testing.T, endpoint string, tc *tls.Config) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client for %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// startStore runs a new `leasebridge store` process in the slot.
func (m *member) startStore(t *testing.T) {
	t.Helper()
	m.start(t, "store", "-c", m.cfgPath, "--log-format", "json")
}

// status asks member m for its status within a renew_call_timeout-scale
// bound, learning its member id.
func (m *member) status(ctx context.Context) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st, err := m.cli.Status(ctx, m.clientURL)
	if err != nil {
		return nil, fmt.Errorf("status of %s at %s: %w", m.name, m.clientURL, err)
	}
	m.id = st.Header.MemberId
	return st, nil
}

// leader is the index of the member every running member names as its
// leader; ok is false while they disagree, one has none, or one does not
// answer.
func (f *fleetLab) leader(ctx context.Context) (int, bool) {
	var lead uint64
	for _, m := range f.members {
		if !m.running() {
			continue
		}
		st, err := m.status(ctx)
		if err != nil || st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return -1, false
		}
		lead = st.Leader
	}
	for i, m := range f.members {
		if m.id == lead && m.running() {
			return i, true
		}
	}
	return -1, false
}

// waitCluster waits until every member answers and all agree on a
// leader.
func (f *fleetLab) waitCluster() error {
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	if err := poll(ctx, func() bool { _, ok := f.leader(ctx); return ok }); err != nil {
		return fmt.Errorf("the fleet's store has no leader every member agrees on: %w", err)
	}
	return nil
}

// lead moves the store's leadership to member i (etcd's MoveLeader, asked
// of the current leader) and waits until every member names it.
func (f *fleetLab) lead(i int) error {
	ctx, cancel := context.WithTimeout(f.ctx, f.report.OwnerDeath.Total)
	defer cancel()
	return poll(ctx, func() bool {
		li, ok := f.leader(ctx)
		if !ok || li == i {
			return ok
		}
		mctx, mcancel := context.WithTimeout(ctx, time.Second)
		defer mcancel()
		if _, err := f.members[li].cli.MoveLeader(mctx, f.members[i].id); err != nil {
			f.t.Logf("move leader %s -> %s: %v", f.members[li].name, f.members[i].name, err)
		}
		return false
	})
}

// rejoin waits until member m, started again, answers with a leader and
// has applied every entry the leader had committed when m first answered.
func (f *fleetLab) rejoin(ctx context.Context, m *member) error {
	var commit uint64
	err := poll(ctx, func() bool {
		st, err := m.status(ctx)
		if err != nil || st.Leader == 0 {
			return false
		}
		if commit == 0 {
			li, ok := f.leader(ctx)
			if !ok {
				return false
			}
			lst, err := f.members[li].status(ctx)
			if err != nil {
				return false
			}
			commit = lst.RaftIndex
		}
		return st.RaftAppliedIndex >= commit
	})
	if err != nil {
		return fmt.Errorf("member %s did not catch up with its leader (commit index %d): %w", m.name, commit, err)
	}
	return nil
}

// memberOf is the member slot of bridge b's node.
func (f *fleetLab) memberOf(b *bridge) *member {
	for i, g := range f.bridges {
		if g == b {
			return f.members[i]
		}
	}
	return nil
}

// nodeKill makes the owner's member the store's leader, lets the fleet
// settle again (a move can cost the owner a renew), and SIGKILLs the
// owner's member and bridge together. A standby takes over; the killed
// node is then started again, member first, and its member caught up.
func (f *fleetLab) nodeKill(tr *trial, owner *bridge) {
	tr.BudgetName, tr.Budget = "owner_death (admit)", f.res.Budget
	owner, m, ok := f.leadAt(tr, owner, f.memberOf)
	if !ok {
		return
	}
	t0 := time.Now()
	_ = m.signal(syscall.SIGKILL)
	_ = owner.signal(syscall.SIGKILL)
	for _, p := range []*proc{m.proc, owner.proc} {
		if _, _, err := p.waitExit(f.report.OwnerDeath.Total); err != nil {
			tr.fail("%v", err)
		}
	}
	tr.Exit = "SIGKILL, bridge and member"
	f.takeover(tr, t0)
	if f.restartMember(tr, m) {
		f.restartBridge(tr, owner)
	}
}

// memberKill SIGKILLs a member while it leads and its gateway's bridge
// keeps running: the owner's when witness is false, else the witness.
// The owner keeps its session unless the election outlasts what its
// fence deadline tolerates (admit warns when it can); then a takeover is
// held to the owner-death budget.
func (f *fleetLab) memberKill(tr *trial, owner *bridge, witness bool) {
	target := f.memberOf
	if witness {
		target = func(*bridge) *member { return f.members[len(f.members)-1] }
	}
	owner, m, ok := f.leadAt(tr, owner, target)
	if !ok {
		return
	}
	t0 := time.Now()
	_ = m.signal(syscall.SIGKILL)
	if _, _, err := m.waitExit(f.report.OwnerDeath.Total); err != nil {
		tr.fail("%v", err)
	}
	tr.note("member %s killed", m.name)
	f.failoverOrNot(tr, owner, t0)
	f.restartMember(tr, m)
}

// quorumLoss SIGKILLs the store's leader and one more member while every
// bridge runs, keeps them down past the owner's fence deadline, then
// starts them again. The owner cannot renew and fences itself: no request
// of its may reach the device after its deadline. Once a majority is
// back a standby (or the fenced owner) takes over, measured from the
// restart against the owner-death budget: nothing can fail over without
// a store.
func (f *fleetLab) quorumLoss(tr *trial, owner *bridge) {
	tr.BudgetName, tr.Budget = "owner_death (admit), from the return", f.res.Budget
	ctx, cancel := context.WithTimeout(f.ctx, 4*f.report.OwnerDeath.Total)
	defer cancel()
	var li int
	if err := poll(ctx, func() bool { var ok bool; li, ok = f.leader(ctx); return ok }); err != nil {
		tr.fail("no leader: %v", err)
		return
	}
	victims := []*member{f.members[li], f.members[(li+1)%len(f.members)]}
	for _, m := range victims {
		_ = m.signal(syscall.SIGKILL)
		if _, _, err := m.waitExit(f.report.OwnerDeath.Total); err != nil {
			tr.fail("%v", err)
		}
	}
	// No renew can land after this instant: its deadline is at most
	// FenceAfter later.
	q1 := time.Now()
	tr.note("members %s (the leader) and %s killed", victims[0].name, victims[1].name)
	tr.FenceBy = q1.Add(owner.report.FenceAfter)
	_ = sleepCtx(f.ctx, f.report.Timing.LeaseTTL+f.report.Timing.RenewInterval)
	back := time.Now()
	tr.Outage = back.Sub(q1)
	for _, m := range victims {
		m.startStore(f.t)
	}
	f.takeover(tr, back)
	if c, err := f.rec.waitClosed(ctx, tr.OldConn); err != nil {
		tr.fail("the fenced owner's device connection: %v", err)
	} else {
		tr.FenceClose = c.CloseAt.Sub(q1)
	}
	for _, m := range victims {
		if err := f.rejoin(ctx, m); err != nil {
			tr.fail("%v", err)
		}
	}
}

// restartMember starts member m again and waits until it has caught up.
func (f *fleetLab) restartMember(tr *trial, m *member) bool {
	restarted := time.Now()
	m.startStore(f.t)
	ctx, cancel := context.WithTimeout(f.ctx, 4*f.report.OwnerDeath.Total)
	defer cancel()
	if err := f.rejoin(ctx, m); err != nil {
		tr.fail("%v", err)
		return false
	}
	took := time.Since(restarted)
	f.res.Rejoin = append(f.res.Rejoin, took)
	tr.note("member %s caught up %s after its restart", m.name, fs(took))
	return true
}

// restartBridge starts b again and waits until it stands by.
func (f *fleetLab) restartBridge(tr *trial, b *bridge) {
	b.start(f.t)
	ctx, cancel := context.WithTimeout(f.ctx, 2*f.report.OwnerDeath.Total)
	defer cancel()
	if err := f.waitStandby(ctx, b); err != nil {
		tr.fail("restarted %v", err)
	}
}

// leadAt moves the store's leadership to target(owner) and settles
// again, up to three times, until an owner is serving and its target
// leads; it returns that owner and member.
func (f *fleetLab) leadAt(tr *trial, owner *bridge, target func(*bridge) *member) (*bridge, *member, bool) {
	for range 3 {
		m := target(owner)
		if err := f.lead(slices.Index(f.members, m)); err != nil {
			tr.fail("leadership to %s: %v", m.name, err)
			return nil, nil, false
		}
		var ok bool
		if owner, ok = f.resettle(tr); !ok {
			return nil, nil, false
		}
		m = target(owner)
		st, err := m.status(f.ctx)
		if err == nil && st.Leader == st.Header.MemberId {
			tr.note("%s led (raft term %d)", m.name, st.RaftTerm)
			return owner, m, true
		}
	}
	tr.fail("the member to kill was not the store's leader after three moves")
	return nil, nil, false
}
