package lab

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
)

// storePath is one bridge's way to the lease store: a fault proxy per
// etcd member, so one bridge's store path can be cut while the others'
// and etcd itself stay healthy.
type storePath []*faultproxy.Proxy

func startStorePath(ctx context.Context, t *testing.T, members []string) storePath {
	t.Helper()
	var s storePath
	for _, m := range members {
		u, err := url.Parse(m)
		if err != nil {
			t.Fatalf("etcd endpoint %q: %v", m, err)
		}
		px, err := faultproxy.Start(ctx, u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		s = append(s, px)
	}
	return s
}

// endpoints is the lease_store.endpoints list for the bridge's config.
func (s storePath) endpoints() string {
	var eps []string
	for _, px := range s {
		eps = append(eps, strconv.Quote("http://"+px.Addr()))
	}
	return strings.Join(eps, ", ")
}

// set puts every proxy of the path in mode m (delay: Delay's hold of the
// responses; requests pass at once).
func (s storePath) set(m faultproxy.Mode, delay time.Duration) error {
	for _, px := range s {
		if err := px.SetDelay(delay); err != nil {
			return err
		}
		if err := px.SetRequestDelay(0); err != nil {
			return err
		}
		if px.Mode() == m {
			continue
		}
		if err := px.SetMode(m); err != nil {
			return fmt.Errorf("store proxy %s -> %s: %w", px.Addr(), px.Target(), err)
		}
	}
	return nil
}

// slow adds a steady round trip of d to every proxy of the path, half on
// the requests and half on the answers, as a slow network does (0: Pass).
func (s storePath) slow(d time.Duration) error {
	if d == 0 {
		return s.set(faultproxy.Pass, 0)
	}
	for _, px := range s {
		if err := px.SetRequestDelay(d / 2); err != nil {
			return err
		}
		if err := px.SetDelay(d - d/2); err != nil {
			return err
		}
		if err := px.SetMode(faultproxy.Delay); err != nil {
			return fmt.Errorf("store proxy %s -> %s: %w", px.Addr(), px.Target(), err)
		}
	}
	return nil
}

// cutStore applies a store-path fault to the owner at t0. The owner's last
// successful renew was sent before t0, so its fence deadline is at most
// FenceAfter later: no request of its may reach the device after that.
func (l *lab) cutStore(tr *trial, owner *bridge, m faultproxy.Mode, delay time.Duration) (time.Time, bool) {
	t0 := time.Now()
	if err := owner.store.set(m, delay); err != nil {
		tr.fail("%s store path: %v", owner.name, err)
		return t0, false
	}
	tr.FenceBy = t0.Add(owner.report.FenceAfter)
	return t0, true
}

// healStore lifts the owner's store fault once its fence deadline has
// passed (so a successor that took over too early meets an owner still
// serving, not one that learnt it lost from the healed store), and waits
// until the old owner, fenced, answers as a standby again.
func (l *lab) healStore(tr *trial, owner *bridge) {
	_ = sleepCtx(l.ctx, time.Until(tr.FenceBy))
	if err := owner.store.set(faultproxy.Pass, 0); err != nil {
		tr.fail("%s store path: %v", owner.name, err)
		return
	}
	l.afterFence(tr, owner)
}

// afterFence waits for the fenced owner's device connection to close and
// for the owner to answer as a standby (unless it took the lease back).
func (l *lab) afterFence(tr *trial, owner *bridge) {
	ctx, cancel := context.WithTimeout(l.ctx, l.report.OwnerDeath.Total)
	defer cancel()
	if _, err := l.rec.waitClosed(ctx, tr.OldConn); err != nil {
		tr.fail("the fenced owner's device connection: %v", err)
	}
	if tr.Succ == owner.name {
		return
	}
	if err := l.waitStandby(ctx, owner); err != nil {
		tr.fail("after the store path healed: %v", err)
	}
}

// storePartition blackholes the owner's store path (silently: sockets
// stay open, nothing is answered) until a standby has taken over. The
// owner keeps running; it must fence itself before the standby's
// takeover, which is held to the owner-death budget.
func (l *lab) storePartition(tr *trial, owner *bridge) {
	l.ownerDeath(tr)
	t0, ok := l.cutStore(tr, owner, faultproxy.Blackhole, 0)
	if !ok {
		return
	}
	l.takeover(tr, t0)
	l.healStore(tr, owner)
}

// responseFault is a store fault whose requests still land: the owner's
// renews keep moving the row until it fences, at most FenceAfter after
// t0, so the standbys' owner-death clock starts no later than that.
func (l *lab) responseFault(tr *trial, owner *bridge, m faultproxy.Mode, delay time.Duration) {
	tr.BudgetName = "fence_after + owner_death"
	tr.Budget = owner.report.FenceAfter + l.report.OwnerDeath.Total
	t0, ok := l.cutStore(tr, owner, m, delay)
	if !ok {
		return
	}
	l.takeover(tr, t0)
	l.healStore(tr, owner)
}

// storeDrop: the owner's store requests reach etcd, their responses are
// dropped.
func (l *lab) storeDrop(tr *trial, owner *bridge) {
	l.responseFault(tr, owner, faultproxy.DropResponses, 0)
}

// storeDelay: the owner's store responses arrive 1-2x renew_call_timeout
// late, after every call has given up on them.
func (l *lab) storeDelay(tr *trial, owner *bridge) {
	f := delayFactors[(tr.Round-1)%len(delayFactors)]
	d := time.Duration(f * float64(owner.report.Timing.RenewCallTimeout))
	tr.note("responses delayed %s (%gx renew_call_timeout)", fs(d), f)
	l.responseFault(tr, owner, faultproxy.Delay, d)
}

// storeHeal blackholes the owner's store path and heals it after a
// fraction of lease_ttl. A partition that outlasts the owner's fence
// deadline must end in a new term (a standby's, or the owner's own after
// it fenced); a shorter one may leave the lease where it was.
func (l *lab) storeHeal(tr *trial, owner *bridge) {
	l.ownerDeath(tr)
	f := healFactors[(tr.Round-1)%len(healFactors)]
	length := time.Duration(f * float64(owner.ttl()))
	t0, ok := l.cutStore(tr, owner, faultproxy.Blackhole, 0)
	if !ok {
		return
	}
	_ = sleepCtx(l.ctx, time.Until(t0.Add(length)))
	if err := owner.store.set(faultproxy.Pass, 0); err != nil {
		tr.fail("%s store path: %v", owner.name, err)
		return
	}
	healed := time.Now()
	tr.note("partition %s, healed %s after the cut", fs(length), fs(healed.Sub(t0)))
	if !tr.FenceBy.After(healed) {
		l.takeover(tr, t0)
		l.afterFence(tr, owner)
		return
	}
	// Renews may land again before the deadline: the fence check does not
	// apply, and the owner may keep its lease.
	tr.FenceBy = time.Time{}
	l.failoverOrNot(tr, owner, t0)
	if tr.Failover {
		l.afterFence(tr, owner)
	}
}

// Rolling-change lease_ttls: the shared configuration's is 2s. The
// shorter still passes admission's self-fence rule with the lab's renew
// cadence; the longer is twice the shared one.
const (
	shortTTL = 1400 * time.Millisecond
	longTTL  = 4 * time.Second
)

// rollShort restarts one standby with a shorter lease_ttl while the fleet
// runs, then cuts the owner's store path. The changed standby sees the
// owner's row go quiet first; it must still not take over before the
// owner (longer lease_ttl) has fenced. The takeover is held to the
// mixed-fleet budget.
func (l *lab) rollShort(tr *trial, owner *bridge) {
	x := l.standbys(owner)[0]
	if !l.reconfigure(tr, x, shortTTL) {
		return
	}
	defer l.restore(tr, x)
	if owner, ok := l.resettle(tr); ok {
		l.rollFault(tr, owner, x)
	}
}

// rollLong restarts one standby with a longer lease_ttl, hands it the
// lease (the other standby frozen while the owner releases), then cuts
// its store path: the standbys with the shorter lease_ttl must wait for
// the longer one.
func (l *lab) rollLong(tr *trial, owner *bridge) {
	sb := l.standbys(owner)
	x, other := sb[0], sb[1]
	if !l.reconfigure(tr, x, longTTL) {
		return
	}
	defer l.restore(tr, x)
	if _, ok := l.resettle(tr); !ok {
		return
	}
	if !l.handTo(tr, x, other) {
		return
	}
	if owner, ok := l.resettle(tr); ok {
		if owner != x {
			tr.fail("the lease went to %s, not to %s with lease_ttl %s", owner.name, x.name, fs(x.ttl()))
			return
		}
		l.rollFault(tr, owner, x)
	}
}

// standbys are the bridges other than owner, in name order.
func (l *lab) standbys(owner *bridge) []*bridge {
	var out []*bridge
	for _, b := range l.bridges {
		if b != owner {
			out = append(out, b)
		}
	}
	return out
}

// reconfigure is one step of a rolling change: b's process ends
// gracefully and a new one starts with lease_ttl ttl (0: the shared one).
func (l *lab) reconfigure(tr *trial, b *bridge, ttl time.Duration) bool {
	if err := b.configure(ttl); err != nil {
		tr.fail("%v", err)
		return false
	}
	if b.running() {
		if err := b.signal(syscall.SIGTERM); err != nil {
			tr.fail("%s: %v", b.name, err)
			return false
		}
		if !l.gracefulExit(tr, b) {
			return false
		}
	}
	b.start(l.t)
	tr.note("%s restarted with lease_ttl %s", b.name, fs(b.ttl()))
	return true
}

// restore ends the rolling change: b runs the shared configuration again
// and the fleet settles.
func (l *lab) restore(tr *trial, b *bridge) {
	if !l.reconfigure(tr, b, 0) {
		return
	}
	if _, _, err := l.settle(); err != nil {
		tr.fail("after restoring %s: %v", b.name, err)
	}
}

// resettle waits for the fleet to settle again in the middle of a trial
// and makes its owner the trial's.
func (l *lab) resettle(tr *trial) (*bridge, bool) {
	owner, epoch, err := l.settle()
	if err != nil {
		tr.fail("settle: %v", err)
		return nil, false
	}
	tr.Owner, tr.Epoch = owner.name, epoch
	tr.OldConn = l.dev.lastBefore(time.Now())
	return owner, true
}

// handTo moves the lease to x: the other standby is frozen, the owner
// ends gracefully (releasing), x takes the released row, the other
// standby resumes and the old owner starts again.
func (l *lab) handTo(tr *trial, x, other *bridge) bool {
	owner := l.bridges[0]
	for _, b := range l.bridges {
		if b != x && b != other {
			owner = b
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, 2*l.report.OwnerDeath.Total)
	defer cancel()
	if err := other.signal(syscall.SIGSTOP); err != nil {
		tr.fail("%s: %v", other.name, err)
		return false
	}
	defer func() { _ = other.signal(syscall.SIGCONT) }()
	if err := owner.signal(syscall.SIGTERM); err != nil {
		tr.fail("%s: %v", owner.name, err)
		return false
	}
	if err := l.waitOwner(ctx, x); err != nil {
		tr.fail("handing the lease to %s: %v", x.name, err)
		return false
	}
	if !l.gracefulExit(tr, owner) {
		return false
	}
	tr.note("lease handed to %s", x.name)
	return true
}

// rollFault cuts the owner's store path in a mixed fleet and holds the
// takeover to the mixed-fleet budget: admission's owner-death budget
// evaluated with the larger lease_ttl of the owner and the changed node.
func (l *lab) rollFault(tr *trial, owner, changed *bridge) {
	in := owner.inputs
	in.Timing.LeaseTTL = max(owner.ttl(), changed.ttl())
	rep := admission.Evaluate(in)
	if !rep.Admitted() {
		tr.fail("mixed-fleet timing (lease_ttl %s) not admitted: %v", fs(in.Timing.LeaseTTL), rep.Refusals)
		return
	}
	tr.BudgetName = fmt.Sprintf("owner_death at lease_ttl %s", admission.FormatSecondsShort(in.Timing.LeaseTTL))
	tr.Budget = rep.OwnerDeath.Total
	t0, ok := l.cutStore(tr, owner, faultproxy.Blackhole, 0)
	if !ok {
		return
	}
	tr.OwnerTTL = owner.ttl()
	tr.note("owner %s (lease_ttl %s) store path blackholed", owner.name, fs(owner.ttl()))
	l.takeover(tr, t0)
	if succ := l.bridge(tr.Succ); succ != nil {
		tr.SuccTTL = succ.ttl()
		tr.note("successor %s lease_ttl %s", succ.name, fs(succ.ttl()))
	}
	l.healStore(tr, owner)
}

func (l *lab) bridge(name string) *bridge {
	for _, b := range l.bridges {
		if b.name == name {
			return b
		}
	}
	return nil
}

// mixedVerdict explains a rolling trial's two clients.
func mixedVerdict(tr *trial) string {
	return fmt.Sprintf("MIXED FLEET UNSAFE: %s (lease_ttl %s) took over while %s (lease_ttl %s) was still serving the device; a standby must wait max(its own lease_ttl, the row owner's lease_ttl) before taking a row over (issue 11, item 1)",
		tr.Succ, fs(tr.SuccTTL), tr.Owner, fs(tr.OwnerTTL))
}

// gracefulExit waits for b to exit after SIGTERM. Exit 0 is a clean stop;
// exit exitcode.Failure is an honest one whose release the store did
// not confirm within its bound (a loaded machine): the row then expires and
// is taken over by the owner-death path, which a rolling step tolerates.
// Anything else fails the trial.
func (l *lab) gracefulExit(tr *trial, b *bridge) bool {
	code, _, err := b.waitExit(l.report.OwnerDeath.Total)
	switch {
	case err == nil && code == exitcode.OK:
		return true
	case err == nil && code == exitcode.Failure:
		tr.note("%s: release not confirmed at SIGTERM (exit %d): its row expires instead", b.name, code)
		return true
	}
	tr.fail("%s: exit %d after SIGTERM (%v), want %d or %d", b.name, code, err, exitcode.OK, exitcode.Failure)
	return false
}
