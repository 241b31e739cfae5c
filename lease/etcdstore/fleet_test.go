package etcdstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
)

// Fleet rows against a real etcd: node rows, bulk session rows next to
// them without collision, handover and drain requests, and watches.
func TestFleetRows(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	st := claimer(t, c, "/fleet-test/")
	other := claimer(t, c, "/fleet-test-other/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rowChanges := st.WatchRow(ctx, "s1")
	ctlChanges := st.WatchControl(ctx)
	// A session named like a fleet space is still its own key.
	for _, key := range []string{"s1", "_nodes", "_ctl"} {
		if _, err := st.CompareAndSwap(ctx, key, 0, lease.Row{Owner: "a#1", Node: "a", Epoch: 3}); err != nil {
			t.Fatal(err)
		}
	}
	n := lease.NodeRow{Node: "a", Owner: "a#1", Sessions: []string{"s1"}, Owned: []string{"s1"}, Interval: time.Second, TTL: 2 * time.Second,
		RenewedAt: time.Now().UnixNano()}
	if err := st.PutNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	nodes, err := st.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes["a"].Owner != "a#1" || nodes["a"].TTL != 2*time.Second {
		t.Fatalf("nodes %+v, %v; want only a", nodes, err)
	}
	if nodes, err := other.Nodes(ctx); err != nil || len(nodes) != 0 {
		t.Fatalf("another key_prefix sees nodes %+v, %v", nodes, err)
	}
	rows, err := st.Rows(ctx, []string{"s1", "_nodes", "missing"})
	if err != nil || rows["s1"].Row.Epoch != 3 || rows["_nodes"].Row.Owner != "a#1" || rows["missing"].Version != 0 || rows["s1"].Version == 0 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	waitSignal(t, rowChanges, "the row watch after the session row was written")
	// More keys than one etcd transaction may read.
	many := make([]string, 300)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	many[299] = "s1"
	if rows, err := st.Rows(ctx, many); err != nil || len(rows) != 300 || rows["s1"].Row.Epoch != 3 || rows["m0"].Version != 0 {
		t.Fatalf("300 rows: %d, %v", len(rows), err)
	}

	h := lease.HandoverRequest{Session: "s1", Epoch: 3, Owner: "a#1", To: "b"}
	if err := st.RequestHandover(ctx, h, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDrain(ctx, "c", true); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ctlChanges, "the control watch after a handover request")
	ctl, err := st.Control(ctx)
	if err != nil || ctl.Handovers["s1"] != h || !ctl.Draining["c"] || len(ctl.Handovers) != 1 || len(ctl.Draining) != 1 {
		t.Fatalf("control %+v, %v", ctl, err)
	}
	// A clear for another epoch leaves the request; the right one deletes it.
	if err := st.ClearHandover(ctx, "s1", 2); err != nil {
		t.Fatal(err)
	}
	if ctl, _ := st.Control(ctx); len(ctl.Handovers) != 1 {
		t.Fatalf("a clear for epoch 2 removed the epoch-3 request")
	}
	if err := st.ClearHandover(ctx, "s1", 3); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDrain(ctx, "c", false); err != nil {
		t.Fatal(err)
	}
	if ctl, err := st.Control(ctx); err != nil || len(ctl.Handovers) != 0 || len(ctl.Draining) != 0 {
		t.Fatalf("after clear and undrain: %+v, %v", ctl, err)
	}
}

func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no signal from %s", what)
	}
}

// WatchRowValues delivers the row as written, with the version a Read
// returns, the release included: what a handover's target offers its
// manager.
func TestWatchRowValues(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	st := claimer(t, c, "/watch-values/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	values := st.WatchRowValues(ctx, "s1")
	next := func(what string) lease.VersionedRow {
		t.Helper()
		select {
		case v := <-values:
			return v
		case <-time.After(10 * time.Second):
			t.Fatalf("no row from the watch after %s", what)
			return lease.VersionedRow{}
		}
	}
	owned := lease.Row{Owner: "a#1", Node: "a", Epoch: 3}
	ver, err := st.CompareAndSwap(ctx, "s1", 0, owned)
	if err != nil {
		t.Fatal(err)
	}
	if v := next("the write"); v.Version != ver || v.Row.Owner != "a#1" || v.Row.Epoch != 3 {
		t.Fatalf("watched %+v, want %+v at version %d", v, owned, ver)
	}
	if err := st.Release(ctx, "s1", ver, lease.Row{Node: "a", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	row, rver, err := st.Read(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if v := next("the release"); v.Version != rver || v.Row.Owner != "" || v.Row != row {
		t.Fatalf("watched %+v, want the released row %+v at version %d", v, row, rver)
	}
	cancel()
	for range values {
	}
}
