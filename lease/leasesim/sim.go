// Package leasesim is a deterministic simulation of lease managers. One
// seed fixes everything: each node's cadence (nodes of one seed may differ,
// as during a rolling change), the number of nodes and sessions,
// every store latency, loss and partition, every process freeze, kill and
// restart, and every jitter draw. It runs on one goroutine with simulated
// clocks whose rates differ by at most admission.ClockRatePPM, drives real
// lease.Core instances against a lease.MemStore behind a simulated
// network, and checks after every step that no two owners of a session are
// ever inside their serve windows at once (safety) and that ownership moves
// within the admitted budgets after an owner dies or releases (liveness).
package leasesim

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/internal/hook"
)

// Modes for Options.FenceMode: the correct core and deliberately broken
// ones the simulation must catch.
const (
	FenceCorrect      = hook.FenceCorrect
	FenceNever        = hook.FenceNever
	FenceFromResponse = hook.FenceFromResponse
	FenceNoHold       = hook.FenceNoHold
	// OwnTTLOnly: a standby waits its own lease_ttl on an unchanged
	// revision, ignoring the longer one the row's owner wrote.
	OwnTTLOnly = hook.OwnTTLOnly
)

// Options select one simulation.
type Options struct {
	Seed uint64
	// FenceMode breaks the self-fence on purpose (test switch). Only a
	// build with -tags leasemutants has the broken modes; any other build
	// refuses a mode but FenceCorrect (ErrNoMutants).
	FenceMode int
	// Trace, when set, receives one line per simulated step.
	Trace io.Writer
	// ForgetCloseBound breaks the fence interval on purpose (test switch):
	// the managers fence at lease_ttl - clock_rate_margin, as if closing
	// took no time.
	ForgetCloseBound bool
	// AllFed makes every node read in bulk (test switch), on every seed.
	AllFed bool
	// Spread runs every node as failover does with spread: true: admitted
	// with the takeover deferral, and every renew interval each session's
	// standbys are told to defer their takeover of the row's holder unless
	// a drawn node is its taker. The draw often names a dead, frozen or
	// partitioned node, so the others take over only after the deferral,
	// which the owner-death budget then includes.
	Spread bool
	// ForgetDeferral breaks the spread budget on purpose (test switch):
	// the liveness limits leave the takeover deferral out.
	ForgetDeferral bool
	// Batch makes nodes renew in batches (a simulated lease.Renewer):
	// BatchHalf each node with probability 1/2, BatchAll every node.
	// BatchOff (the default) renews per session, as seeds always did.
	Batch int
	// SlowCalm gives every node's store path, in each calm phase, a
	// steady round trip between 0.55 and 0.95 of the node's own
	// renew_call_timeout: every call completes, but an Acquire's read and
	// compare-and-swap, which share one renew_call_timeout, do not fit
	// together, so every takeover's compare-and-swap times out after it
	// landed. The budgets assume they fit; the liveness limits then allow
	// the rest of that call and one Acquire more (the read that finds the
	// landed compare-and-swap ours), see slowCalmExtra.
	SlowCalm bool
}

// Values of Options.Batch.
const (
	BatchOff  = 0
	BatchHalf = 1
	BatchAll  = 2
)

// Failure is a violated assertion; its Seed replays it exactly.
type Failure struct {
	Seed uint64
	Kind string // "safety", "liveness" or "release"
	At   time.Duration
	Msg  string
}

// Error names the seed, the violated property and the instant.
func (f *Failure) Error() string {
	return fmt.Sprintf("leasesim seed %d: %s violation at t=%v: %s", f.Seed, f.Kind, f.At, f.Msg)
}

// Stats summarize one run.
type Stats struct {
	Steps     int
	Takeovers int
	// FedTakeovers are the takeovers by nodes that read in bulk.
	FedTakeovers int
	Probes       int // owner deaths and releases checked for liveness
	// MaxOwnerDeath is the probed owner death whose takeover came
	// closest to its budget, OwnerDeathLimit that budget:
	// admission.OwnerDeath with A = S = 0 and the larger of the owner's
	// and the standby's lease_ttl.
	MaxOwnerDeath   time.Duration
	OwnerDeathLimit time.Duration
	// MaxRelease is the probed release whose takeover came closest to its
	// budget, ReleaseLimit that budget: 2 poll boundaries + 2 calls.
	MaxRelease   time.Duration
	ReleaseLimit time.Duration
	// Batches are the batch calls of batched nodes, BatchedRenews the
	// renews they carried, BatchedNodes the nodes that batch.
	Batches, BatchedRenews, BatchedNodes int
	Timing                               string
	// Mixed is true when the nodes' cadences differ.
	Mixed bool
}

// scenario is one admitted cadence the simulation draws from.
type scenario struct {
	l, r, j, c, p time.Duration
	close         time.Duration
}

var scenarios = []scenario{
	{l: 2 * time.Second, r: 300 * time.Millisecond, j: 100 * time.Millisecond, c: 200 * time.Millisecond, p: 400 * time.Millisecond, close: 100 * time.Millisecond},
	{l: time.Second, r: 150 * time.Millisecond, j: 60 * time.Millisecond, c: 100 * time.Millisecond, p: 150 * time.Millisecond, close: 50 * time.Millisecond},
	// The clustered profile, scaled down ten times.
	{l: 4500 * time.Millisecond, r: time.Second, j: 100 * time.Millisecond, c: 300 * time.Millisecond, p: 500 * time.Millisecond, close: 200 * time.Millisecond},
	// Tight: the self-fence inequality with little slack.
	{l: 2 * time.Second, r: 800 * time.Millisecond, j: 200 * time.Millisecond, c: 400 * time.Millisecond, p: 300 * time.Millisecond, close: 150 * time.Millisecond},
}

type event struct {
	at   int64
	seq  uint64
	node *node // nil: a world event
	gen  int
	fn   func()
}

// queue orders events by time, then by scheduling order, so equal
// instants replay identically.
type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type node struct {
	id          int
	sc          scenario
	cfg         lease.Config
	gen         int
	alive       bool
	frozen      bool
	partitioned bool
	off, ppm    int64
	mgrs        []*mgr
	deferred    []*event
	// fed nodes read every row in one bulk read per poll (lease.RowSource)
	// and feed their standbys from it; the others read per session.
	fed bool
	// batched nodes renew every row they own in one batch call per tick
	// (lease.Renewer); the others renew per session.
	batched bool
	// leg, when set, is every network leg of the node's store calls: a
	// slow calm phase (Options.SlowCalm).
	leg int64
}

// local is the node's clock at real instant r: a fixed offset and a rate
// within +-(ClockRatePPM/2 - 1) ppm of real time.
func (n *node) local(r int64) time.Duration {
	return time.Duration(n.off + r + r*n.ppm/1_000_000)
}

// real is the first real instant at which the node's clock reads >= l.
func (n *node) real(l time.Duration) int64 {
	if l == lease.Never {
		return maxTime
	}
	r := (int64(l) - n.off) * 1_000_000 / (1_000_000 + n.ppm)
	for n.local(r) < l {
		r++
	}
	for n.local(r-1) >= l {
		r--
	}
	return r
}

const maxTime = int64(1<<62 - 1)

type mgr struct {
	n       *node
	session int
	inc     int // incarnation of this manager slot
	id      lease.Identity
	core    *lease.Core
	opID    uint64
	wakeID  uint64
	term    *term
	stopped bool
	// partitioned cuts this manager alone off the store.
	partitioned bool
	// chaosRelease: a release asked for in a chaos phase; if it completes
	// in the calm phase, the manager restarts as a standby then.
	chaosRelease bool
}

func (m *mgr) cut() bool { return m.partitioned || m.n.partitioned }

type term struct {
	m       *mgr
	session int
	epoch   uint64
	start   int64
	end     int64 // when closed
	closed  bool
	dl      time.Duration // local fence deadline while open
}

// worstEnd is the latest real instant the term may still touch the
// device: its fence deadline plus the close bound, or its recorded end.
func (s *sim) worstEnd(t *term) int64 {
	if t.closed {
		return t.end
	}
	return s.closedBy(t.m.n, t.dl)
}

// closedBy is the real instant by which a term whose context ended at
// local instant end has closed its transports: the close bound is enforced
// by the owner's own timers, so it runs on the owner's clock.
func (s *sim) closedBy(n *node, end time.Duration) int64 {
	if end >= lease.Never-n.sc.close {
		return maxTime
	}
	return n.real(end + n.sc.close)
}

type obligation struct {
	kind    string // "liveness" or "release"
	session int
	victim  string // identity of the dead or releasing owner
	anchor  int64  // -1 until a release lands
	limit   int64
	since   int64
}

type sim struct {
	o    Options
	rnd  *rand.Rand
	brnd *rand.Rand // the draws of bulk reads
	rrnd *rand.Rand // the draws of batched renewals
	// collect, while set, takes the ops send is given into a batch.
	collect *batch
	srnd    *rand.Rand // the draws of takers (Options.Spread)
	now     int64
	seq     uint64
	q       queue
	store   *lease.MemStore
	// The fleet's shortest and longest lease_ttl and call timeouts: they
	// size the phases and the store latency.
	lmin, lmax, cmin, cmax int64
	keys                   []string
	nodes                  []*node
	terms                  [][]*term // per session, open or not yet past
	epoch                  []uint64  // highest epoch seen per session
	obl                    []*obligation
	fail                   *Failure
	calm                   bool
	// lossy store path
	drop, lose float64
	latMax     int64
	stats      Stats
	// The largest owner-death and release limits of any probe.
	odMax, relMax int64
	// slowExtra is added to every limit with Options.SlowCalm
	// (slowCalmExtra).
	slowExtra int64
}

// ErrNoMutants reports a broken FenceMode asked of a build without
// -tags leasemutants, whose lease.Core has no broken mode.
var ErrNoMutants = errors.New("leasesim: fence modes other than FenceCorrect need -tags leasemutants")

// Run simulates one seed and returns its statistics, or a *Failure.
func Run(o Options) (Stats, error) {
	if o.FenceMode != FenceCorrect && hook.SetFenceMode == nil {
		return Stats{}, fmt.Errorf("%w (fence mode %d)", ErrNoMutants, o.FenceMode)
	}
	s := &sim{o: o, rnd: rand.New(rand.NewPCG(o.Seed, 0x1ea5eb1d6e))}
	if err := s.setup(); err != nil {
		return s.stats, err
	}
	end := s.schedule()
	for s.q.Len() > 0 && s.fail == nil {
		e := heap.Pop(&s.q).(*event)
		if e.at > end {
			break
		}
		s.now = e.at
		if e.node != nil {
			if e.gen != e.node.gen {
				continue // for a process that has since been killed
			}
			if e.node.frozen {
				e.node.deferred = append(e.node.deferred, e)
				continue
			}
		}
		s.stats.Steps++
		e.fn()
		s.checkObligations()
	}
	if s.fail != nil {
		return s.stats, s.fail
	}
	return s.stats, nil
}

func (s *sim) setup() error {
	nn, ns := 3+s.rnd.IntN(3), 1+s.rnd.IntN(3)
	// A quarter of the seeds run one cadence on every node; the others
	// draw each node's cadence, as a fleet in a rolling change has.
	uniform := s.rnd.IntN(4) == 0
	s.stats.Mixed = !uniform
	var first scenario
	for i := range nn {
		sc := first
		if i == 0 || !uniform {
			sc = s.drawScenario()
		}
		if i == 0 {
			first = sc
		}
		cfg, err := s.admit(sc, 1+s.rnd.IntN(3))
		if err != nil {
			return err
		}
		s.lmax = max(s.lmax, int64(sc.l))
		s.cmax = max(s.cmax, int64(sc.c))
		if i == 0 || int64(sc.c) < s.cmin {
			s.cmin = int64(sc.c)
		}
		if i == 0 || int64(sc.l) < s.lmin {
			s.lmin = int64(sc.l)
		}
		s.nodes = append(s.nodes, &node{id: i, sc: sc, cfg: cfg})
		s.stats.Timing += fmt.Sprintf("n%d{L=%v R=%v J=%v C=%v P=%v close=%v fence_after=%v max_renew_fails=%d} ",
			i, sc.l, sc.r, sc.j, sc.c, sc.p, sc.close, cfg.FenceAfter, cfg.MaxRenewFails)
	}
	if s.o.SlowCalm {
		extra, err := s.slowCalmExtra()
		if err != nil {
			return err
		}
		s.slowExtra = extra
	}
	for _, v := range s.nodes {
		for _, b := range s.nodes {
			if _, _, err := s.budgets(v, b); err != nil {
				return err
			}
		}
		od, rel := s.limits(v)
		s.odMax, s.relMax = max(s.odMax, od), max(s.relMax, rel)
	}

	s.drawPaths()
	s.store = lease.NewMemStore()
	for i := range ns {
		s.keys = append(s.keys, fmt.Sprintf("s%d", i))
	}
	s.terms = make([][]*term, ns)
	s.epoch = make([]uint64, ns)
	// Rates within +-499 ppm of real time: any two clocks' rates then
	// differ by a ratio of at most 1 + ClockRatePPM/1e6, the bound
	// admission's clock_rate_margin is computed for.
	half := int64(admission.ClockRatePPM/2 - 1)
	for _, n := range s.nodes {
		n.off, n.ppm = s.rnd.Int64N(int64(1000*time.Second)), s.rnd.Int64N(2*half+1)-half
		for j := range ns {
			n.mgrs = append(n.mgrs, &mgr{n: n, session: j})
		}
		s.startNode(n)
	}
	s.calm = true
	if s.o.Spread {
		s.srnd = rand.New(rand.NewPCG(s.o.Seed^0x5b7ead, 0xdefe7))
		s.spreadTick()
	}
	s.tracef("setup seed=%d nodes=%d sessions=%d mixed=%v %s", s.o.Seed, nn, ns, s.stats.Mixed, s.stats.Timing)
	for _, n := range s.nodes {
		s.tracef("n%d fed=%v batched=%v", n.id, n.fed, n.batched)
	}
	return nil
}

// drawPaths draws which nodes read in bulk and which renew in batches.
func (s *sim) drawPaths() {
	// On odd seeds each node feeds its standbys from bulk reads with
	// probability 1/2 (a fleet mixing both read paths, as during the
	// upgrade that introduced them); even seeds read per session on every
	// node. Bulk reads draw from their own source, so even seeds replay as
	// they did before bulk reads existed.
	s.brnd = rand.New(rand.NewPCG(s.o.Seed^0x5eed, 0xb01c))
	for _, n := range s.nodes {
		n.fed = s.o.AllFed || s.o.Seed%2 == 1 && s.brnd.IntN(2) == 0
	}
	// Batched renewals draw from their own source too: without them a
	// seed replays as it did before they existed.
	s.rrnd = rand.New(rand.NewPCG(s.o.Seed^0xba7c4, 0x4e3e))
	for _, n := range s.nodes {
		n.batched = s.o.Batch == BatchAll || s.o.Batch == BatchHalf && s.rrnd.IntN(2) == 0
		if n.batched {
			s.stats.BatchedNodes++
		}
	}
}

// drawScenario picks a shipped cadence, and half of the time scales it and
// varies renew_interval, acquire_poll_interval and renew_call_timeout on
// their own, keeping the draw only if admission admits it.
func (s *sim) drawScenario() scenario {
	base := scenarios[s.rnd.IntN(len(scenarios))]
	if s.rnd.IntN(2) == 0 {
		return base
	}
	per := func(d time.Duration, lo, hi int64) time.Duration {
		return d * time.Duration(lo+s.rnd.Int64N(hi-lo+1)) / 1000
	}
	k := 750 + s.rnd.Int64N(501) // the whole cadence at 0.75x to 1.25x
	sc := scenario{l: per(base.l, k, k), r: per(base.r, k, k), j: per(base.j, k, k), c: per(base.c, k, k), p: per(base.p, k, k), close: per(base.close, k, k)}
	sc.r = per(sc.r, 750, 1500)
	sc.p = per(sc.p, 750, 2000)
	sc.c = per(sc.c, 700, 1300)
	if _, err := s.admit(sc, 1); err != nil {
		return base
	}
	return sc
}

// admit runs sc through admission and returns the lease configuration the
// managers of a node with that cadence run.
func (s *sim) admit(sc scenario, maxFails int) (lease.Config, error) {
	rep := admission.Evaluate(admission.Inputs{
		Session: "sim", Timing: timingOf(sc, maxFails), BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
		Transports: []admission.Activation{{Name: "sim", Close: sc.close}}, Spread: s.o.Spread,
	})
	if !rep.Admitted() {
		return lease.Config{}, fmt.Errorf("leasesim: scenario %+v refused by admission: %v", sc, rep.Refusals)
	}
	cfg := lease.ConfigFromReport(rep)
	if s.o.ForgetCloseBound {
		cfg.FenceAfter += rep.CloseBound
	}
	return cfg, nil
}

func timingOf(sc scenario, maxFails int) admission.Timing {
	return admission.Timing{
		LeaseTTL: sc.l, RenewInterval: sc.r, RenewJitter: sc.j, RenewCallTimeout: sc.c,
		AcquirePollInterval: sc.p, StepDownGrace: time.Second, MaxRenewFails: maxFails,
	}
}

// budgets are the takeover budgets of standby b after owner v dies or
// releases: the owner-death budget with the larger of both lease_ttl
// values and b's own poll interval and call timeout (A = S = 0), and two
// of b's poll boundaries and calls after a release; with spread, both plus
// the takeover deferral; with a slow calm phase, both plus slowExtra.
func (s *sim) budgets(v, b *node) (ownerDeath, release int64, err error) {
	t := timingOf(b.sc, b.cfg.MaxRenewFails)
	t.LeaseTTL = max(v.sc.l, b.sc.l)
	od, err := admission.OwnerDeath(t, 0, 0)
	if s.o.Spread && !s.o.ForgetDeferral {
		od, err = admission.OwnerDeathSpread(t, 0, 0)
	}
	if err != nil {
		return 0, 0, err
	}
	pb, err := admission.PollBoundary(t.AcquirePollInterval)
	if err != nil {
		return 0, 0, err
	}
	ownerDeath, release = int64(od.Total), int64(2*pb+2*t.RenewCallTimeout)
	if s.o.Spread && !s.o.ForgetDeferral {
		// A handover's other standbys defer too; the drawn taker may be
		// dead or stuck.
		d, err := admission.TakeoverDeferral(t)
		if err != nil {
			return 0, 0, err
		}
		release += int64(d)
	}
	return ownerDeath + s.slowExtra, release + s.slowExtra, nil
}

// slowCalmExtra is what a slow calm phase (Options.SlowCalm) adds to every
// takeover limit. By the time the quickest standby's takeover is due, the
// compare-and-swap of some standby w has landed (perhaps w's, not the
// quickest one's, whose own then conflicts); it times out at the end of
// w's call, no more than w's renew_call_timeout after it landed, and w's
// next Acquire, at most a poll boundary and one call later, finds the row
// its own with that epoch and becomes owner (lease.Core adopts it without
// writing again). So the limit grows by the largest poll boundary plus two
// call timeouts of any node. Before that adoption every re-take wrote
// again and timed out again, and no takeover ever came.
func (s *sim) slowCalmExtra() (int64, error) {
	var extra int64
	for _, w := range s.nodes {
		pb, err := admission.PollBoundary(w.sc.p)
		if err != nil {
			return 0, err
		}
		extra = max(extra, int64(pb+2*w.sc.c))
	}
	return extra, nil
}

func (s *sim) tracef(format string, args ...any) {
	if s.o.Trace != nil {
		fmt.Fprintf(s.o.Trace, "%12v ", time.Duration(s.now))
		fmt.Fprintf(s.o.Trace, format+"\n", args...)
	}
}

func (s *sim) at(t int64, n *node, fn func()) {
	gen := 0
	if n != nil {
		gen = n.gen
	}
	s.atGen(t, n, gen, fn)
}

// atGen schedules fn for incarnation gen of n; it is dropped if n has been
// killed since.
func (s *sim) atGen(t int64, n *node, gen int, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: t, seq: s.seq, node: n, gen: gen, fn: fn})
}

func (s *sim) startNode(n *node) {
	n.alive = true
	for _, m := range n.mgrs {
		s.startMgr(m)
	}
	if n.fed {
		s.bulkRead(n)
	}
	if n.batched {
		s.nextRenewTick(n)
	}
}

func (s *sim) startMgr(m *mgr) {
	m.inc++
	m.stopped, m.chaosRelease = false, false
	m.term = nil
	m.id = lease.Identity{Node: fmt.Sprintf("n%d", m.n.id), Owner: fmt.Sprintf("n%d#%d.%d", m.n.id, m.n.gen, m.inc)}
	seed := s.o.Seed ^ uint64(m.n.id)<<40 ^ uint64(m.session)<<32 ^ uint64(m.n.gen)<<16 ^ uint64(m.inc)
	core, err := lease.NewCore(m.n.cfg, m.id, s.keys[m.session], rand.New(rand.NewPCG(seed, 0xc0de)), m.n.local(s.now))
	if err != nil {
		panic(err) // the configuration was admitted and validated above
	}
	if s.o.FenceMode != FenceCorrect {
		hook.SetFenceMode(core, s.o.FenceMode)
	}
	core.SetFed(m.n.fed)
	core.SetBatched(m.n.batched)
	m.core = core
	s.handle(m, core.Tick(m.n.local(s.now)))
}

// handle applies a core step: events, term bookkeeping, the next call or
// wake-up, and the safety check.
func (s *sim) handle(m *mgr, st lease.Step) {
	for _, ev := range st.Events {
		s.onEvent(m, ev)
	}
	if m.term != nil && !m.term.closed {
		if _, dl, ok := m.core.Owner(); ok {
			m.term.dl = dl
		}
	}
	switch {
	case st.Op.Kind != lease.OpNone:
		s.send(m, st.Op)
	case st.WakeAt != lease.Never:
		m.wakeID++
		id := m.wakeID
		s.at(max(s.now, m.n.real(st.WakeAt)), m.n, func() {
			if id == m.wakeID && !m.stopped {
				s.handle(m, m.core.Tick(m.n.local(s.now)))
			}
		})
	}
	s.checkSafety(m.session)
}

func (s *sim) onEvent(m *mgr, ev lease.Event) {
	s.tracef("n%d %s %s epoch=%d", m.n.id, s.keys[m.session], ev.Kind, ev.Epoch)
	switch ev.Kind {
	case lease.EventBecameOwner:
		_, dl, _ := m.core.Owner()
		t := &term{m: m, session: m.session, epoch: ev.Epoch, start: s.now, dl: dl}
		if ev.Epoch <= s.epoch[m.session] {
			s.failf("safety", "%s: n%d became owner at epoch %d, not above the highest epoch %d", s.keys[m.session], m.n.id, ev.Epoch, s.epoch[m.session])
		}
		s.epoch[m.session] = ev.Epoch
		m.term = t
		s.terms[m.session] = append(s.terms[m.session], t)
		s.stats.Takeovers++
		if m.n.fed {
			s.stats.FedTakeovers++
		}
		s.meet(t)
	case lease.EventFenced:
		if m.term != nil {
			s.closeTerm(m, s.worstEnd(m.term))
		}
	case lease.EventLost:
		if m.term != nil {
			s.closeTerm(m, min(s.closedBy(m.n, m.n.local(s.now)), s.worstEnd(m.term)))
		}
	case lease.EventReleased:
		m.stopped = true
		if s.calm && m.chaosRelease {
			// The calm phase's heal ran while this release was in
			// flight: stand by again, as heal would have made it.
			inc := m.inc
			s.at(s.now, m.n, func() {
				if m.stopped && m.inc == inc {
					s.startMgr(m)
				}
			})
		}
	}
}

func (s *sim) closeTerm(m *mgr, end int64) {
	if m.term == nil || m.term.closed {
		return
	}
	m.term.end, m.term.closed = end, true
	m.term = nil
}

// checkSafety asserts that no two terms of a session overlap, taking each
// open term at its worst case.
func (s *sim) checkSafety(session int) {
	ts := s.terms[session][:0]
	for _, t := range s.terms[session] {
		if !t.closed || t.end > s.now {
			ts = append(ts, t)
		}
	}
	s.terms[session] = ts
	for i := range ts {
		for j := i + 1; j < len(ts); j++ {
			a, b := ts[i], ts[j]
			ae, be := s.worstEnd(a), s.worstEnd(b)
			if a.start < be && b.start < ae {
				s.failf("safety", "%s: two owners inside their serve windows: %s epoch %d [%v, %s) and %s epoch %d [%v, %s)",
					s.keys[session], a.m.id.Owner, a.epoch, time.Duration(a.start), fmtEnd(ae), b.m.id.Owner, b.epoch, time.Duration(b.start), fmtEnd(be))
			}
		}
	}
}

func (s *sim) failf(kind, format string, args ...any) {
	if s.fail != nil {
		return
	}
	s.fail = &Failure{Seed: s.o.Seed, Kind: kind, At: time.Duration(s.now), Msg: fmt.Sprintf(format, args...)}
	s.tracef("FAIL %s", s.fail.Msg)
}

// latency draws one network leg of a call by node n from r: n's steady
// leg in a slow calm phase, else uniform up to the fleet's latMax.
func (s *sim) latency(n *node, r *rand.Rand) int64 {
	if n.leg > 0 {
		return n.leg
	}
	if s.latMax <= 0 {
		return 0
	}
	return r.Int64N(s.latMax + 1)
}

func timeoutErr(op lease.Op) error {
	return fmt.Errorf("leasesim: %s of %q: %w", op.Kind, op.Key, lease.ErrUnavailable)
}

// send puts op on the simulated network. The call ends with the response
// or at its deadline, whichever the node sees first; a request that was
// sent still lands even after the caller gave up or died.
func (s *sim) send(m *mgr, op lease.Op) {
	m.opID++
	id := m.opID
	n := m.n
	done := func(r lease.Result) {
		if m.opID != id || m.stopped && op.Kind != lease.OpRelease {
			return
		}
		s.tracef("n%d %s done %s err=%v", n.id, op.Key, op.Kind, r.Err)
		m.opID++ // the call is over; later arrivals are stale
		s.handle(m, m.core.Done(n.local(s.now), r))
	}
	s.at(max(s.now, n.real(op.Deadline)), n, func() { done(lease.Result{Err: timeoutErr(op)}) })
	if s.collect != nil {
		s.collect.add(m, op, done)
		return
	}
	s.tracef("n%d %s send %s expect=%d row=%+v", n.id, op.Key, op.Kind, op.Expect, op.Row)
	if m.cut() || (s.drop > 0 && s.rnd.Float64() < s.drop) {
		return
	}
	gen, who := n.gen, m.id.Owner
	s.at(s.now+s.latency(n, s.rnd), nil, func() {
		if m.cut() {
			return
		}
		r := s.apply(who, op)
		if op.Kind == lease.OpRead || op.Kind == lease.OpAuthRead {
			s.tracef("store %s %s from %s -> ver=%d row=%+v err=%v", op.Key, op.Kind, who, r.Version, r.Row, r.Err)
		} else {
			s.tracef("store %s %s from %s expect=%d row=%+v -> ver=%d err=%v", op.Key, op.Kind, who, op.Expect, op.Row, r.Version, r.Err)
		}
		if s.lose > 0 && s.rnd.Float64() < s.lose {
			return
		}
		s.atGen(s.now+s.latency(n, s.rnd), n, gen, func() {
			if m.cut() {
				return
			}
			done(r)
		})
	})
}

func (s *sim) apply(who string, op lease.Op) lease.Result {
	ctx := bg
	var r lease.Result
	switch op.Kind {
	case lease.OpRead:
		r.Row, r.Version, r.Err = s.store.Read(ctx, op.Key)
	case lease.OpAuthRead:
		r.Row, r.Version, r.Err = s.store.ReadAuthoritative(ctx, op.Key)
	case lease.OpCAS:
		r.Version, r.Err = s.store.CompareAndSwap(ctx, op.Key, op.Expect, op.Row)
	case lease.OpRelease:
		if s.o.Spread {
			// As failover releases in a handover or an orderly stop: the
			// holder's deferred standbys defer the released row too.
			op.Row.Release = &lease.Release{Cause: lease.ReleaseCauseHandover}
		}
		r.Err = s.store.Release(ctx, op.Key, op.Expect, op.Row)
	}
	if r.Err == nil && (op.Kind == lease.OpCAS || op.Kind == lease.OpRelease) {
		s.landed(who, op)
	}
	return r
}

func fmtEnd(t int64) string {
	if t == maxTime {
		return "never"
	}
	return time.Duration(t).String()
}

// spreadTick draws, for every session, the node that takes its row if its
// holder dies (any node, dead or alive), and tells every other node's
// standby to defer its takeover of that holder's row, as failover's fleet
// does every node interval. A free row is never deferred: failover defers
// one only while a node starts, outside every budget probed here.
func (s *sim) spreadTick() {
	for j, key := range s.keys {
		row, _ := s.store.Get(key)
		taker := s.srnd.IntN(len(s.nodes))
		for _, n := range s.nodes {
			if m := n.mgrs[j]; m.core != nil {
				m.core.Defer(row.Owner, row.Owner != "" && n.id != taker)
			}
		}
	}
	s.at(s.now+int64(s.nodes[0].sc.r), nil, s.spreadTick)
}
