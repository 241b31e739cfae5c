package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
)

// The cadence under test: short, so the suite is quick, and admitted by
// admission like any configuration. Every duration asserted below comes
// from admission's arithmetic on it.
var timing = admission.Timing{
	LeaseTTL:            2 * time.Second,
	RenewInterval:       300 * time.Millisecond,
	RenewJitter:         100 * time.Millisecond,
	RenewCallTimeout:    300 * time.Millisecond,
	AcquirePollInterval: 300 * time.Millisecond,
	StepDownGrace:       time.Second,
	MaxRenewFails:       2,
}

const closeBound = 100 * time.Millisecond

// startWait bounds a first acquisition, which includes connecting; it is
// a test timeout, not an asserted budget.
const startWait = 10 * time.Second

type budgets struct {
	cfg        lease.Config
	ownerDeath time.Duration // admission.OwnerDeath with no activation or startup
	release    time.Duration // two poll boundaries plus two calls
	pollBound  time.Duration
}

func admit(t *testing.T) budgets { t.Helper(); return admitTiming(t, timing) }

// admitTiming admits tm and computes its budgets.
func admitTiming(t *testing.T, timing admission.Timing) budgets {
	t.Helper()
	rep := admission.Evaluate(admission.Inputs{
		Session: "test", Timing: timing,
		BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
		Transports:   []admission.Activation{{Name: "test", Close: closeBound}},
	})
	if !rep.Admitted() {
		t.Fatalf("test cadence refused: %v", rep.Refusals)
	}
	od, err := admission.OwnerDeath(timing, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := admission.PollBoundary(timing.AcquirePollInterval)
	if err != nil {
		t.Fatal(err)
	}
	return budgets{cfg: lease.ConfigFromReport(rep), ownerDeath: od.Total, release: 2*pb + 2*timing.RenewCallTimeout, pollBound: pb}
}

// node is one manager with its own etcd client, as one bridge process.
type node struct {
	t      *testing.T
	name   string
	m      *lease.Manager
	store  *etcdstore.Store
	cancel context.CancelFunc
	done   chan error
	events chan lease.Event

	mu  sync.Mutex
	log []lease.Event
}

func startNode(t *testing.T, c *testetcd.Cluster, b budgets, key, name string, wrap func(lease.Store) lease.Store) *node {
	t.Helper()
	return startNodeWith(t, c, b, key, name, wrap, false)
}

// startNodeWith starts a node; bulk gives its manager a lease.RowSource of
// its own store, as failover does.
func startNodeWith(t *testing.T, c *testetcd.Cluster, b budgets, key, name string, wrap func(lease.Store) lease.Store, bulk bool) *node {
	t.Helper()
	st, err := etcdstore.New(context.Background(), etcdstore.Config{
		Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second,
		KeyPrefix: "/leasebridge/test/", CallTimeout: timing.RenewCallTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, store: st, done: make(chan error, 1), events: make(chan lease.Event, 1000)}
	var s lease.Store = st
	if wrap != nil {
		s = wrap(st)
	}
	var rows *lease.RowSource
	if bulk {
		if rows, err = lease.NewRowSource(lease.RowSourceOptions{Store: st}); err != nil {
			t.Fatal(err)
		}
	}
	n.m, err = lease.NewManager(lease.Options{
		Store: s, Key: key, Identity: lease.NewIdentity(name), Config: b.cfg, Rows: rows,
		OnEvent: func(ev lease.Event) {
			n.mu.Lock()
			n.log = append(n.log, ev)
			n.mu.Unlock()
			n.events <- ev
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- n.m.Run(ctx) }()
	t.Cleanup(func() {
		n.kill()
		_ = st.Close()
	})
	return n
}

// kill stops the manager without releasing, as a crash would, and returns
// when it has stopped.
func (n *node) kill() time.Duration {
	n.cancel()
	<-n.done
	n.done <- nil // later kills return at once
	return lease.Now()
}

// wait returns the next event of kind, failing after timeout.
func (n *node) wait(kind lease.EventKind, timeout time.Duration) lease.Event {
	n.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-n.events:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			n.t.Fatalf("%s: no %s event within %v; events: %v", n.name, kind, timeout, n.history())
		}
	}
}

func (n *node) history() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, ev := range n.log {
		out = append(out, fmt.Sprintf("%s@%d", ev.Kind, ev.Epoch))
	}
	return out
}

func (n *node) count(kind lease.EventKind) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, ev := range n.log {
		if ev.Kind == kind {
			c++
		}
	}
	return c
}

// firstOwner waits until one of ns becomes owner and returns it.
func firstOwner(t *testing.T, within time.Duration, ns ...*node) (*node, lease.Event) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, n := range ns {
			select {
			case ev := <-n.events:
				if ev.Kind == lease.EventBecameOwner {
					return n, ev
				}
			default:
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no owner among %d managers within %v", len(ns), within)
	return nil, lease.Event{}
}

func TestEtcdEmbedded(t *testing.T) { suite(t, testetcd.StartEmbedded) }

func TestEtcdBinary(t *testing.T) { suite(t, testetcd.StartBinary) }

func suite(t *testing.T, start func(testing.TB, int) *testetcd.Cluster) {
	b := admit(t)
	t.Logf("cadence %+v fence_after=%v owner-death budget %v release budget %v", b.cfg, b.cfg.FenceAfter, b.ownerDeath, b.release)
	c := start(t, 3)
	t.Run("TakeoverAfterOwnerKill", func(t *testing.T) { takeoverAfterKill(t, c, b, false) })
	t.Run("Release", func(t *testing.T) { release(t, c, b, false) })
	t.Run("BulkTakeoverAfterOwnerKill", func(t *testing.T) { takeoverAfterKill(t, c, b, true) })
	t.Run("BulkRelease", func(t *testing.T) { release(t, c, b, true) })
	t.Run("ReadPrefix", func(t *testing.T) { readPrefix(t, c) })
	t.Run("Contention", func(t *testing.T) { contention(t, c, b) })
	t.Run("LostResponseAdoption", func(t *testing.T) { lostResponse(t, c, b) })
	t.Run("LeaderKill", func(t *testing.T) { leaderKill(t, c, b) })
	t.Run("QuorumLoss", func(t *testing.T) { quorumLoss(t, c, b) })
	t.Run("MixedTiming", func(t *testing.T) { mixedTiming(t, c, b) })
	t.Run("RowWithoutTiming", func(t *testing.T) { rowWithoutTiming(t, c, b) })
}

// takeoverAfterKill: bulk makes the standby read through a RowSource.
func takeoverAfterKill(t *testing.T, c *testetcd.Cluster, b budgets, bulk bool) {
	a := startNode(t, c, b, t.Name(), "a", nil)
	a.wait(lease.EventBecameOwner, startWait)
	o := a.m.Owner()
	s := startNodeWith(t, c, b, t.Name(), "b", nil, bulk)
	time.Sleep(2 * timing.RenewInterval) // b is polling
	killedAt := a.kill()
	// The last renew a knew had landed was sent at deadline - fence_after.
	lastRenewSent := o.Deadline() - b.cfg.FenceAfter
	ev := s.wait(lease.EventBecameOwner, 2*b.ownerDeath)
	took := ev.At - killedAt
	t.Logf("owner killed; standby owner after %v (owner-death budget %v); from first observation of the stale row %v", took, b.ownerDeath, ev.At-ev.Observed)
	if took > b.ownerDeath {
		t.Fatalf("takeover took %v, over the owner-death budget %v", took, b.ownerDeath)
	}
	// One clock here, so no margin: a takeover earlier than lease_ttl
	// after the owner's last renew was sent would break the fence proof.
	if early := lastRenewSent + timing.LeaseTTL - ev.At; early > 0 {
		t.Fatalf("takeover %v before lease_ttl had passed since the owner's last renew was sent", early)
	}
	if ev.Epoch != 2 {
		t.Fatalf("takeover epoch %d, want 2", ev.Epoch)
	}
}

func release(t *testing.T, c *testetcd.Cluster, b budgets, bulk bool) {
	a := startNode(t, c, b, t.Name(), "a", nil)
	first := a.wait(lease.EventBecameOwner, startWait)
	o := a.m.Owner()
	s := startNodeWith(t, c, b, t.Name(), "b", nil, bulk)
	time.Sleep(2 * timing.RenewInterval)
	calledAt := lease.Now()
	if err := a.m.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	landedAt := lease.Now()
	if cause := context.Cause(o.Context()); !errors.Is(cause, lease.ErrReleased) {
		t.Fatalf("owner context cause after release = %v, want ErrReleased", cause)
	}
	ev := s.wait(lease.EventBecameOwner, 2*b.ownerDeath)
	took := ev.At - landedAt
	t.Logf("release call %v; standby owner %v after it returned (budget two poll boundaries + two calls = %v)", landedAt-calledAt, took, b.release)
	if took > b.release {
		t.Fatalf("released lease taken after %v, over %v", took, b.release)
	}
	if ev.Epoch != first.Epoch+1 {
		t.Fatalf("epoch %d after release of %d", ev.Epoch, first.Epoch)
	}
	if err := <-a.done; err != nil {
		t.Fatalf("released manager's Run = %v, want nil", err)
	}
	a.done <- nil
}

func contention(t *testing.T, c *testetcd.Cluster, b budgets) {
	ns := []*node{
		startNode(t, c, b, t.Name(), "a", nil),
		startNode(t, c, b, t.Name(), "b", nil),
		startNode(t, c, b, t.Name(), "c", nil),
	}
	owner, ev := firstOwner(t, startWait, ns...)
	// Hold for a whole lease_ttl and more: nobody else may win, and the
	// owner must keep renewing.
	time.Sleep(timing.LeaseTTL + b.pollBound)
	for _, n := range ns {
		want := 0
		if n == owner {
			want = 1
		}
		if got := n.count(lease.EventBecameOwner); got != want {
			t.Fatalf("%s became owner %d times, want %d (events %v)", n.name, got, want, n.history())
		}
		if n.count(lease.EventFenced)+n.count(lease.EventLost) != 0 {
			t.Fatalf("%s fenced or lost under contention: %v", n.name, n.history())
		}
	}
	killedAt := owner.kill()
	var rest []*node
	for _, n := range ns {
		if n != owner {
			rest = append(rest, n)
		}
	}
	next, ev2 := firstOwner(t, 2*b.ownerDeath, rest...)
	took := ev2.At - killedAt
	t.Logf("%s won among three; after its kill %s owner in %v (owner-death budget %v)", owner.name, next.name, took, b.ownerDeath)
	if took > b.ownerDeath {
		t.Fatalf("takeover among contenders took %v, over %v", took, b.ownerDeath)
	}
	if ev2.Epoch != ev.Epoch+1 {
		t.Fatalf("epoch %d after %d", ev2.Epoch, ev.Epoch)
	}
	time.Sleep(b.pollBound + timing.RenewCallTimeout)
	for _, n := range rest {
		if n != next && n.count(lease.EventBecameOwner) != 0 {
			t.Fatalf("two contenders became owner: %s and %s", next.name, n.name)
		}
	}
}

// lossy loses the responses of the next CAS calls after they landed.
type lossy struct {
	lease.Store
	lose atomic.Int32
}

func (l *lossy) CompareAndSwap(ctx context.Context, key string, expect int64, row lease.Row) (int64, error) {
	v, err := l.Store.CompareAndSwap(ctx, key, expect, row)
	if err == nil && l.lose.Add(-1) >= 0 {
		return 0, fmt.Errorf("%w: response to the write of %q lost (test)", lease.ErrUnavailable, key)
	}
	return v, err
}

func lostResponse(t *testing.T, c *testetcd.Cluster, b budgets) {
	// A takeover whose response is lost: the next Acquire finds the row
	// ours with exactly that takeover's epoch and becomes owner without
	// writing again (a second takeover would write epoch 2, and with a
	// store round trip between half and one renew_call_timeout each would
	// time out after landing in turn).
	var l *lossy
	a := startNode(t, c, b, t.Name(), "a", func(s lease.Store) lease.Store {
		l = &lossy{Store: s}
		l.lose.Store(1)
		return l
	})
	startedAt := lease.Now()
	ev := a.wait(lease.EventBecameOwner, b.ownerDeath)
	if ev.Epoch != 1 {
		t.Fatalf("became owner at epoch %d, want 1: the takeover that landed unacknowledged, adopted", ev.Epoch)
	}
	if row, _, err := a.store.Read(context.Background(), t.Name()); err != nil || row.Epoch != 1 || row.Node != a.name {
		t.Fatalf("row %+v (%v) after the adoption, want a's at epoch 1", row, err)
	}
	if took := ev.At - startedAt; took > b.release {
		t.Fatalf("reclaim of our own landed takeover took %v, over %v", took, b.release)
	}
	// Renews whose responses are lost, max_renew_fails in a row: the
	// authoritative read finds the row still ours and the owner adopts it.
	s := startNode(t, c, b, t.Name(), "b", nil)
	row0, rev0, err := a.store.Read(context.Background(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	l.lose.Store(int32(timing.MaxRenewFails))
	time.Sleep(timing.LeaseTTL + b.pollBound)
	row1, rev1, err := a.store.Read(context.Background(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if l.lose.Load() >= 0 {
		t.Fatalf("only %d of %d lost responses consumed", int32(timing.MaxRenewFails)-l.lose.Load(), timing.MaxRenewFails)
	}
	if row1.RenewedAt <= row0.RenewedAt {
		t.Fatalf("renewed_at %d after lost renew responses, want past %d: the renews landed", row1.RenewedAt, row0.RenewedAt)
	}
	row0.RenewedAt, row1.RenewedAt = 0, 0
	if row1 != row0 || rev1 <= rev0 {
		t.Fatalf("row %+v@%d after lost renew responses, want %+v renewed past %d", row1, rev1, row0, rev0)
	}
	if n := a.count(lease.EventFenced) + a.count(lease.EventLost); n != 0 {
		t.Fatalf("owner fenced or lost after adopting its own writes: %v", a.history())
	}
	if s.count(lease.EventBecameOwner) != 0 {
		t.Fatal("standby took over from an owner whose renews landed")
	}
	if o := a.m.Owner(); o == nil || !o.Valid() {
		t.Fatal("owner handle not valid after adoption")
	}
}

func leaderKill(t *testing.T, c *testetcd.Cluster, b budgets) {
	a := startNode(t, c, b, t.Name(), "a", nil)
	a.wait(lease.EventBecameOwner, startWait)
	s := startNode(t, c, b, t.Name(), "b", nil)
	time.Sleep(2 * timing.RenewInterval)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	li, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(li)
	killedAt := lease.Now()
	t.Cleanup(func() { c.Restart(li) })
	nl, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader m%d killed; m%d leader after %v", li, nl, lease.Now()-killedAt)
	// Renewals continue across the election; nothing may change hands.
	time.Sleep(timing.LeaseTTL + b.pollBound)
	if n := a.count(lease.EventFenced) + a.count(lease.EventLost); n != 0 {
		t.Fatalf("owner fenced or lost across a leader change: %v", a.history())
	}
	if s.count(lease.EventBecameOwner) != 0 {
		t.Fatal("standby took over across a leader change")
	}
	if o := a.m.Owner(); o == nil || !o.Valid() {
		t.Fatal("owner not valid after the leader change")
	}
}

func quorumLoss(t *testing.T, c *testetcd.Cluster, b budgets) {
	a := startNode(t, c, b, t.Name(), "a", nil)
	a.wait(lease.EventBecameOwner, startWait)
	o := a.m.Owner()
	s := startNode(t, c, b, t.Name(), "b", nil)
	time.Sleep(2 * timing.RenewInterval)
	c.Kill(1)
	c.Kill(2)
	// No renew sent from here on can land.
	lostAt := lease.Now()
	fenced := a.wait(lease.EventFenced, 2*timing.LeaseTTL)
	<-o.Context().Done()
	if cause := context.Cause(o.Context()); !errors.Is(cause, lease.ErrFenced) {
		t.Fatalf("owner context cause %v, want ErrFenced", cause)
	}
	deadline := o.Deadline()
	t.Logf("quorum lost; owner fenced %v later at its deadline (fence_after %v)", fenced.At-lostAt, b.cfg.FenceAfter)
	if fenced.At < deadline {
		t.Fatalf("fenced at %v before its deadline %v", fenced.At, deadline)
	}
	if deadline-lostAt > b.cfg.FenceAfter {
		t.Fatalf("fence deadline %v after quorum loss, more than fence_after %v after it: it rests on a renew sent before", deadline-lostAt, b.cfg.FenceAfter)
	}
	restoredAt := lease.Now()
	c.Restart(1)
	c.Restart(2)
	owner, ev := firstOwner(t, 2*b.ownerDeath, a, s)
	t.Logf("quorum restored; %s owner at epoch %d after %v (owner-death budget %v)", owner.name, ev.Epoch, ev.At-restoredAt, b.ownerDeath)
	if ev.At <= fenced.At {
		t.Fatal("new owner before the old owner fenced")
	}
	// No one may start a term before the old one's deadline plus the
	// close bound and clock margin, whoever it is.
	if ev.At < deadline+timing.LeaseTTL-b.cfg.FenceAfter {
		t.Fatalf("new term at %v, before old deadline %v + close + margin", ev.At, deadline)
	}
	if took := ev.At - restoredAt; took > b.ownerDeath {
		t.Fatalf("takeover %v after quorum returned, over %v", took, b.ownerDeath)
	}
}

// readPrefix: one Range returns every row under the prefix with the
// version a single-row read returns, keyed without the key prefix; a value
// that is not a row carries its error; keys outside the prefix are not read.
func readPrefix(t *testing.T, c *testetcd.Cluster) {
	ctx := context.Background()
	st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second,
		KeyPrefix: "/leasebridge/test/", CallTimeout: timing.RenewCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := t.Name() + "/"
	rows := map[string]lease.Row{p + "a": {Owner: "n1#x", Node: "n1", Epoch: 3}, p + "b": {Epoch: 4}}
	for k, r := range rows {
		if _, err := st.CompareAndSwap(ctx, k, 0, r); err != nil {
			t.Fatal(err)
		}
	}
	cli := rawClient(t, c)
	if _, err := cli.Put(ctx, "/leasebridge/test/"+p+"junk", "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/leasebridge/test/"+t.Name()+"-other", "{}"); err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadPrefix(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("ReadPrefix(%q) = %d rows %v, want a, b and junk", p, len(got), got)
	}
	for k, want := range rows {
		row, ver, err := st.Read(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want.RenewedAt = row.RenewedAt // the store stamps it on every write
		if g := got[k]; g.Err != nil || g.Row != want || g.Row != row || g.Version != ver {
			t.Fatalf("ReadPrefix %q = %+v, Read = %+v at %d, want %+v", k, g, row, ver, want)
		}
	}
	if g := got[p+"junk"]; g.Err == nil || !strings.Contains(g.Err.Error(), "not a lease row") {
		t.Fatalf("junk value: %+v, want a decoding error", g)
	}
}
