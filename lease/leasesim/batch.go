package leasesim

import (
	"time"

	"github.com/leasebridge/leasebridge/lease"
)

// batch is one batch call of a batched node's renewer: the renews its
// owners issued at one tick, each with the completion send set up for it
// (its own call bound included).
type batch struct {
	sent  time.Duration // on the node's clock
	items []batchItem
}

type batchItem struct {
	m    *mgr
	op   lease.Op
	done func(lease.Result)
}

func (b *batch) add(m *mgr, op lease.Op, done func(lease.Result)) {
	b.items = append(b.items, batchItem{m: m, op: op, done: done})
}

// nextRenewTick schedules the node's next renewer tick: uniform in
// lease.TickRange on the node's clock, as lease.Renewer draws it.
func (s *sim) nextRenewTick(n *node) {
	lo, hi := lease.TickRange(n.cfg)
	wait := lo + time.Duration(s.rrnd.Int64N(int64(hi-lo)+1))
	s.at(max(s.now, n.real(n.local(s.now)+wait)), n, func() { s.renewTick(n) })
}

// renewTick asks every owner of the node to renew now (Core.RenewNow) and
// sends their renews as one batch call. A manager whose own path is cut
// is not asked: its own timer renews it alone, into the cut.
func (s *sim) renewTick(n *node) {
	now := n.local(s.now)
	b := &batch{sent: now}
	for _, m := range n.mgrs {
		if m.stopped || m.core == nil || m.cut() || m.core.State() != lease.StateOwner {
			continue
		}
		st, renew := m.core.RenewNow(now)
		if renew {
			s.collect = b
		}
		s.handle(m, st)
		s.collect = nil
	}
	s.sendBatch(n, b)
	s.nextRenewTick(n)
}

// sendBatch puts a batch on the node's simulated network as one request:
// lost, delayed or answered as a whole, every row on its own compare, and
// each core handed its own row's outcome with the batch's send instant.
func (s *sim) sendBatch(n *node, b *batch) {
	if len(b.items) == 0 {
		return
	}
	s.stats.Batches++
	s.stats.BatchedRenews += len(b.items)
	s.tracef("n%d batch send %d renews", n.id, len(b.items))
	if n.partitioned || (s.drop > 0 && s.rrnd.Float64() < s.drop) {
		return
	}
	gen := n.gen
	s.at(s.now+s.latency(n, s.rrnd), nil, func() {
		if n.partitioned {
			return
		}
		res := make([]lease.Result, len(b.items))
		for i, it := range b.items {
			res[i] = s.apply(it.m.id.Owner, it.op)
			res[i].Sent = b.sent
		}
		s.tracef("store batch of %d from n%d", len(b.items), n.id)
		if s.lose > 0 && s.rrnd.Float64() < s.lose {
			return
		}
		s.atGen(s.now+s.latency(n, s.rrnd), n, gen, func() {
			if n.partitioned {
				return
			}
			for i, it := range b.items {
				it.done(res[i])
			}
		})
	})
}
