package failover

import (
	"fmt"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
)

// TimingMismatch compares this node's lease timing with the one the row's
// owner wrote, for /readyz and logs. Durations are integer nanoseconds.
type TimingMismatch struct {
	// Own is this node's timing; Row the owner's, zero when the row
	// carries none (written by an older binary).
	Own lease.RowTiming `json:"own"`
	Row lease.RowTiming `json:"row"`
	// RowHasTiming is false for a row without timing.
	RowHasTiming bool `json:"row_has_timing"`
	// RowOwner is the owner identity that wrote the row.
	RowOwner string `json:"row_owner"`
	// TakeoverWaitNS is how long this node waits on an unchanged revision
	// of that owner's row before taking it over: the longer lease_ttl.
	TakeoverWaitNS int64 `json:"takeover_wait_ns"`
}

// timingState is a session's view of the row owners' timing; guarded by
// session.mu.
type timingState struct {
	current *TimingMismatch
	seen    map[lease.RowTiming]bool // distinct mismatching timings, logged and counted once
}

// onTiming records a timing mismatch or match reported by the lease
// manager: gauge, counter and status always, the warning once per
// distinct owner timing. The log line and the metrics are written before
// the status changes, so whoever sees the status on /readyz also finds
// them.
func (s *session) onTiming(ev lease.Event) {
	m := s.sup.o.Metrics
	tr := ev.Timing
	if ev.Kind == lease.EventTimingMatch {
		s.log.Info("lease timing matches the row owner's", "row_owner", tr.RowOwner, "lease_ttl", admission.FormatSeconds(tr.Own.LeaseTTL))
		m.TimingMismatch.WithLabelValues(s.name).Set(0)
		s.setTiming(nil)
		return
	}
	cur := &TimingMismatch{Own: tr.Own, Row: tr.Row, RowHasTiming: tr.Row != lease.RowTiming{}, RowOwner: tr.RowOwner, TakeoverWaitNS: int64(tr.Wait)}
	s.mu.Lock()
	first := !s.timing.seen[tr.Row]
	if first {
		if s.timing.seen == nil {
			s.timing.seen = map[lease.RowTiming]bool{}
		}
		s.timing.seen[tr.Row] = true
	}
	s.mu.Unlock()
	if first {
		m.TimingMismatches.WithLabelValues(s.name).Inc()
		row := "none (the row carries no timing: written by an older binary)"
		if cur.RowHasTiming {
			row = formatTiming(tr.Row)
		}
		s.log.Warn("lease timing differs from the row owner's: a takeover waits the longer lease_ttl",
			"row_owner", tr.RowOwner, "own_timing", formatTiming(tr.Own), "row_timing", row,
			"takeover_wait", admission.FormatSeconds(tr.Wait))
	}
	m.TimingMismatch.WithLabelValues(s.name).Set(1)
	s.setTiming(cur)
}

func (s *session) setTiming(cur *TimingMismatch) {
	s.mu.Lock()
	s.timing.current = cur
	s.mu.Unlock()
}

func formatTiming(t lease.RowTiming) string {
	f := admission.FormatSeconds
	return fmt.Sprintf("lease_ttl=%s renew_interval=%s renew_call_timeout=%s acquire_poll_interval=%s fence_after=%s",
		f(t.LeaseTTL), f(t.RenewInterval), f(t.RenewCallTimeout), f(t.AcquirePollInterval), f(t.FenceAfter))
}
