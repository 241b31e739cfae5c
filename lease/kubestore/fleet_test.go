package kubestore_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasebridge/leasebridge/internal/testkube"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/kubestore"
)

// waitSignal waits for a watch's signal.
func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no watch signal for %s", what)
	}
}

// drain empties a watch channel of signals already sent.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// Fleet rows on Leases: node rows, session rows in bulk, handover and
// drain requests set, cleared only at their epoch, lapsing by observation,
// and watches that signal their changes.
func TestFleetRows(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("fleet")
	s := newStore(t, api, testkube.AdminToken, ns, "/plant/")
	ctx := ctxT(t)
	n := lease.NodeRow{Node: "Node_A", Owner: "Node_A#1", Sessions: []string{"s1"}, Interval: time.Second, TTL: 3 * time.Second, RenewedAt: 7}
	for range 2 { // a create, then a write over it
		if err := s.PutNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := s.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes["Node_A"].Owner != "Node_A#1" || nodes["Node_A"].TTL != 3*time.Second {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
	ls, err := api.Admin().CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: kubestore.LabelKind + "=node"})
	if err != nil || len(ls.Items) != 1 || holder(&ls.Items[0]) != "Node_A#1" || *ls.Items[0].Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("node Leases %+v %v", ls, err)
	}
	v, err := s.CompareAndSwap(ctx, "s1", 0, lease.Row{Owner: "Node_A#1", Node: "Node_A", Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Rows(ctx, []string{"s1", "s2"})
	if err != nil || rows["s1"].Version != v || rows["s1"].Row.Epoch != 3 || rows["s2"].Version != 0 {
		t.Fatalf("rows %+v %v", rows, err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctl := s.WatchControl(wctx)
	row := s.WatchRow(wctx, "s1")
	if err := s.RequestHandover(ctx, lease.HandoverRequest{Session: "s1", Epoch: 3, Owner: "Node_A#1", To: "b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ctl, "a handover request")
	if err := s.SetDrain(ctx, "Node_A", true); err != nil {
		t.Fatal(err)
	}
	c, err := s.Control(ctx)
	if err != nil || c.Handovers["s1"].To != "b" || !c.Draining["Node_A"] {
		t.Fatalf("control %+v %v", c, err)
	}
	if err := s.ClearHandover(ctx, "s1", 2); err != nil { // another epoch: stays
		t.Fatal(err)
	}
	drain(ctl)
	if err := s.ClearHandover(ctx, "s1", 3); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, ctl, "a cleared handover request")
	if err := s.SetDrain(ctx, "Node_A", false); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Control(ctx); err != nil || len(c.Handovers) != 0 || len(c.Draining) != 0 {
		t.Fatalf("after clearing: %+v %v", c, err)
	}
	drain(row)
	if _, err := s.CompareAndSwap(ctx, "s1", v, lease.Row{Owner: "b#1", Node: "b", Epoch: 4}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, row, "a row write")

	// A request nobody clears lapses once seen unchanged for its ttl.
	if err := s.RequestHandover(ctx, lease.HandoverRequest{Session: "s1", Epoch: 4, Owner: "b#1"}, time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		c, err := s.Control(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, standing := c.Handovers["s1"]; !standing {
			break
		}
		time.Sleep(100 * time.Millisecond) // a reader's poll
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("a request with a 1 s ttl lapsed after %v", d)
	}
}
