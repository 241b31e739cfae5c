package failover

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/lease"
)

// A mismatch is logged and counted once per distinct owner timing, the
// gauge follows the latest report, and the status carries it until a
// matching row clears it.
func TestTimingMismatchOncePerDistinctValue(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	sv := &Supervisor{o: Options{Metrics: m}}
	s := &session{sup: sv, name: "plc", log: slog.New(slog.NewTextHandler(&logs, nil))}
	sv.sessions = []*session{s}
	own := lease.RowTiming{LeaseTTL: 6 * time.Second, RenewInterval: time.Second, RenewCallTimeout: time.Second, AcquirePollInterval: time.Second, FenceAfter: 5 * time.Second}
	long := own
	long.LeaseTTL, long.FenceAfter = 20*time.Second, 19*time.Second
	ev := func(kind lease.EventKind, row lease.RowTiming) lease.Event {
		return lease.Event{Kind: kind, Timing: lease.TimingReport{Own: own, Row: row, RowOwner: "a#1", Wait: max(own.LeaseTTL, row.LeaseTTL)}}
	}
	value := func(name string) float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == name && len(f.Metric) == 1 {
				return f.Metric[0].GetGauge().GetValue() + f.Metric[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("no series %s", name)
		return 0
	}
	gauge := func() float64 { return value("leasebridge_timing_mismatch") }
	count := func() float64 { return value("leasebridge_timing_mismatches_total") }

	for _, e := range []lease.Event{ev(lease.EventTimingMismatch, long), ev(lease.EventTimingMatch, own), ev(lease.EventTimingMismatch, long)} {
		s.handle(e)
	}
	if gauge() != 1 || count() != 1 || strings.Count(logs.String(), "lease timing differs") != 1 {
		t.Fatalf("after the same owner timing twice: gauge %v, count %v, log\n%s", gauge(), count(), logs.String())
	}
	st := sv.Status()[0].TimingMismatch
	if st == nil || st.Row != long || st.Own != own || time.Duration(st.TakeoverWaitNS) != long.LeaseTTL || !st.RowHasTiming {
		t.Fatalf("status %+v", st)
	}
	s.handle(ev(lease.EventTimingMismatch, lease.RowTiming{}))
	if count() != 2 || !strings.Contains(logs.String(), "the row carries no timing") {
		t.Fatalf("a row without timing: count %v, log\n%s", count(), logs.String())
	}
	if st := sv.Status()[0].TimingMismatch; st == nil || st.RowHasTiming {
		t.Fatalf("status for a row without timing: %+v", st)
	}
	s.handle(ev(lease.EventTimingMatch, own))
	if gauge() != 0 || sv.Status()[0].TimingMismatch != nil {
		t.Fatalf("after a match: gauge %v, status %+v", gauge(), sv.Status()[0].TimingMismatch)
	}
}
