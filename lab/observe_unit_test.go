package lab

import (
	"context"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
)

// The recorder's verdicts are what the lab fails on; these feed it
// snapshots by hand so a detector that could never fire is caught.

// feed hands the recorder a snapshot as if observed at the given offset.
func feed(r *plcRecorder, base time.Time, at time.Duration, current int, conns ...faultproxy.ConnStats) {
	// observe stamps time.Now(); shift the stamps it adds to at.
	before := map[int]int{}
	for id, c := range r.conns {
		before[id] = len(c.Ups)
	}
	nCur := len(r.current)
	r.observe(faultproxy.Stats{Current: current, Conns: conns})
	stamp := base.Add(at)
	for id, c := range r.conns {
		if _, ok := before[id]; !ok {
			c.OpenAt = stamp
		}
		for i := before[id]; i < len(c.Ups); i++ {
			c.Ups[i].At = stamp
		}
		if !c.CloseAt.IsZero() && c.CloseAt.After(stamp) {
			c.CloseAt = stamp
		}
	}
	for i := nCur; i < len(r.current); i++ {
		r.current[i].At = stamp
	}
}

func newRecorder() *plcRecorder {
	return &plcRecorder{conns: map[int]*connTrack{}, changed: make(chan struct{})}
}

func TestRecorderSequentialOwnersDoNotOverlap(t *testing.T) {
	r := newRecorder()
	base := time.Now().Add(-time.Hour)
	ms := time.Millisecond
	feed(r, base, 0, 1, faultproxy.ConnStats{ID: 1, Open: true, BytesUp: 12, Requests: 1})
	feed(r, base, 50*ms, 1, faultproxy.ConnStats{ID: 1, Open: true, BytesUp: 24, Requests: 2})
	feed(r, base, 100*ms, 0, faultproxy.ConnStats{ID: 1, Open: false, BytesUp: 24, Requests: 2})
	feed(r, base, 2000*ms, 1, faultproxy.ConnStats{ID: 1, BytesUp: 24, Requests: 2},
		faultproxy.ConnStats{ID: 2, Open: true, BytesUp: 12, Requests: 1})
	if o := r.overlaps(); len(o) != 0 {
		t.Fatalf("sequential owners reported as overlapping: %v", o)
	}
	if n := r.peakServing(base, base.Add(3*time.Second)); n != 1 {
		t.Fatalf("peakServing = %d, want 1", n)
	}
	if n := r.peakOpen(base, base.Add(3*time.Second)); n != 1 {
		t.Fatalf("peakOpen = %d, want 1", n)
	}
	c, _ := r.conn(1)
	if e := c.at(base.Add(60 * ms)); e.Requests != 2 || e.BytesUp != 24 {
		t.Fatalf("counters at 60ms = %+v", e)
	}
	if e := c.at(base.Add(10 * ms)); e.Requests != 1 {
		t.Fatalf("counters at 10ms = %+v", e)
	}
}

func TestRecorderCatchesTwoServingConnections(t *testing.T) {
	r := newRecorder()
	base := time.Now().Add(-time.Hour)
	ms := time.Millisecond
	feed(r, base, 0, 1, faultproxy.ConnStats{ID: 1, Open: true, BytesUp: 12, Requests: 1})
	feed(r, base, 50*ms, 2, faultproxy.ConnStats{ID: 1, Open: true, BytesUp: 12, Requests: 1},
		faultproxy.ConnStats{ID: 2, Open: true, BytesUp: 12, Requests: 1})
	// The old owner sends again after the new one started: two clients.
	feed(r, base, 100*ms, 2, faultproxy.ConnStats{ID: 1, Open: true, BytesUp: 24, Requests: 2},
		faultproxy.ConnStats{ID: 2, Open: true, BytesUp: 12, Requests: 1})
	if o := r.overlaps(); len(o) != 1 {
		t.Fatalf("overlaps = %v, want one pair", o)
	}
	if n := r.peakServing(base, base.Add(time.Second)); n != 2 {
		t.Fatalf("peakServing = %d, want 2", n)
	}
	if n := r.peakOpen(base.Add(60*ms), base.Add(time.Second)); n != 2 {
		t.Fatalf("peakOpen = %d, want 2", n)
	}
	// A window after the overlap ended still sees what was in effect at
	// its start.
	feed(r, base, 200*ms, 1, faultproxy.ConnStats{ID: 1, BytesUp: 24, Requests: 2},
		faultproxy.ConnStats{ID: 2, Open: true, BytesUp: 24, Requests: 2})
	if n := r.peakOpen(base.Add(300*ms), base.Add(time.Second)); n != 1 {
		t.Fatalf("peakOpen after the overlap = %d, want 1", n)
	}
}

func TestValueWatchEpochsGapsAndStaleValues(t *testing.T) {
	w := &valueWatch{changed: make(chan struct{})}
	for _, p := range []string{`{"epoch":3}`, `{"epoch":3}`, `{"epoch":4}`, `{"epoch":3}`, `{"status":"x"}`} {
		w.record(0, []byte(p))
	}
	if w.highest() != 4 {
		t.Fatalf("highest = %d", w.highest())
	}
	if n := w.staleBetween(time.Now().Add(-time.Minute), time.Now()); n != 1 {
		t.Fatalf("stale = %d, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a, err := w.waitAbove(ctx, 3)
	if err != nil || a.Epoch != 4 {
		t.Fatalf("waitAbove(3) = %+v, %v", a, err)
	}
	if es := w.epochsAbove(2, time.Now().Add(-time.Minute), time.Now()); len(es) != 2 || es[0] != 3 || es[1] != 4 {
		t.Fatalf("epochsAbove(2) = %v, want [3 4]", es)
	}
	if _, err := w.waitAbove(ctx, 4); err == nil {
		t.Fatal("waitAbove(4) found a value that was never published")
	}
	from := time.Now()
	w.mu.Lock()
	w.all = []arrival{{At: from.Add(10 * time.Millisecond), Epoch: 7}, {At: from.Add(510 * time.Millisecond), Epoch: 7},
		{At: from.Add(520 * time.Millisecond), Epoch: 8}}
	w.mu.Unlock()
	if g := w.maxGap(7, from, from.Add(600*time.Millisecond)); g != 500*time.Millisecond {
		t.Fatalf("maxGap = %s, want 500ms", g)
	}
}
