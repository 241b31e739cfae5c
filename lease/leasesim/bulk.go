package leasesim

import (
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
)

// bulkRead is one round of a fed node's row source (lease.RowSource): one
// ReadPrefix over the simulated network, bounded by the node's
// renew_call_timeout, whose rows feed every standby that waits for one
// when the response (or the timeout) reaches the node; then a jittered
// poll on the node's clock and the next round. A partitioned node's read
// is lost, a frozen node's rounds wait for its resume, a killed node's
// stop.
func (s *sim) bulkRead(n *node) {
	sent := n.local(s.now)
	over := false
	end := func(rows map[string]lease.Result, err error) {
		if over {
			return
		}
		over = true
		s.tracef("n%d bulk read done rows=%d err=%v", n.id, len(rows), err)
		for _, m := range n.mgrs {
			if m.stopped || m.cut() || !m.core.WantsFeed() {
				continue
			}
			r := lease.Result{Err: err}
			if rv, ok := rows[s.keys[m.session]]; ok && err == nil {
				r = rv
			}
			s.handle(m, m.core.Feed(n.local(s.now), sent, r))
		}
		lo := admission.MinJitteredPoll(n.cfg.AcquirePollInterval)
		hi, _ := admission.PollBoundary(n.cfg.AcquirePollInterval) // admitted
		wait := lo + time.Duration(s.brnd.Int64N(int64(hi-lo)+1))
		s.at(max(s.now, n.real(n.local(s.now)+wait)), n, func() { s.bulkRead(n) })
	}
	timeout := timeoutErr(lease.Op{Kind: lease.OpRead, Key: "*"})
	s.at(max(s.now, n.real(sent+n.cfg.RenewCallTimeout)), n, func() { end(nil, timeout) })
	s.tracef("n%d bulk read send", n.id)
	if n.partitioned || (s.drop > 0 && s.brnd.Float64() < s.drop) {
		return
	}
	gen := n.gen
	s.at(s.now+s.latency(n, s.brnd), nil, func() {
		if n.partitioned {
			return
		}
		rows, err := s.store.ReadPrefix(bg, "")
		s.tracef("store bulk read from n%d -> %d rows err=%v", n.id, len(rows), err)
		if s.lose > 0 && s.brnd.Float64() < s.lose {
			return
		}
		s.atGen(s.now+s.latency(n, s.brnd), n, gen, func() {
			if !n.partitioned {
				end(rows, err)
			}
		})
	})
}
