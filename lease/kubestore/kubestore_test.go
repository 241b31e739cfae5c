package kubestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasebridge/leasebridge/internal/testkube"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/kubestore"
)

// callTimeout bounds each call: a test timeout on a loaded machine, not
// an asserted budget.
const callTimeout = 10 * time.Second

func newStore(t *testing.T, api *testkube.APIServer, token, ns, prefix string) *kubestore.Store {
	t.Helper()
	s, err := kubestore.New(kubestore.Config{Namespace: ns, Kubeconfig: api.Kubeconfig(token, "", ns),
		KeyPrefix: prefix, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var timing = lease.RowTiming{LeaseTTL: 2500 * time.Millisecond, RenewInterval: 300 * time.Millisecond,
	RenewCallTimeout: 200 * time.Millisecond, AcquirePollInterval: 200 * time.Millisecond, FenceAfter: 1500 * time.Millisecond}

// getLease reads the Lease object behind a row as kubectl would.
func getLease(t *testing.T, api *testkube.APIServer, ns, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := api.Admin().CoordinationV1().Leases(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitions(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return -1
	}
	return *l.Spec.LeaseTransitions
}

// The Store contract on a real API server: create, compare-and-swap on
// the version, a stale version refused with nothing written, release,
// takeover, a deleted row never recreated by a stale write but created
// anew from version 0; and the Lease fields kubectl shows tell the truth.
func TestStoreContract(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("contract")
	s := newStore(t, api, testkube.AdminToken, ns, "/plant/")
	ctx := ctxT(t)

	if row, v, err := s.Read(ctx, "s1"); err != nil || v != 0 || row.Owner != "" {
		t.Fatalf("missing row: %+v %d %v", row, v, err)
	}
	a := lease.Row{Owner: "node-a/1", Node: "node-a", Epoch: 1, Timing: timing}
	v1, err := s.CompareAndSwap(ctx, "s1", 0, a)
	if err != nil || v1 <= 0 {
		t.Fatalf("create: %d %v", v1, err)
	}
	if _, err := s.CompareAndSwap(ctx, "s1", 0, a); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	v2, err := s.CompareAndSwap(ctx, "s1", v1, a)
	if err != nil || v2 <= v1 {
		t.Fatalf("renew: %d after %d, %v", v2, v1, err)
	}
	b := lease.Row{Owner: "node-b/1", Node: "node-b", Epoch: 2, Timing: timing}
	if _, err := s.CompareAndSwap(ctx, "s1", v1, b); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("stale version: %v, want ErrConflict", err)
	}
	row, v, err := s.ReadAuthoritative(ctx, "s1")
	if err != nil || v != v2 || row.Owner != a.Owner || row.Epoch != 1 || row.Timing != timing || row.RenewedAt == 0 {
		t.Fatalf("after the refused write: %+v at %d (%v), want %+v at %d", row, v, err, a, v2)
	}
	l := getLease(t, api, ns, "plant.s1")
	if holder(l) != "node-a/1" || *l.Spec.LeaseDurationSeconds != 3 || transitions(l) != 0 || l.Spec.AcquireTime == nil {
		t.Fatalf("Lease spec after create: %+v", l.Spec)
	}
	acquired := l.Spec.AcquireTime.Time

	// Release, then another owner: one transition, a new acquireTime.
	rel := a
	rel.Release = &lease.Release{Cause: lease.ReleaseCauseHandover, AtUnixNS: 42}
	if err := s.Release(ctx, "s1", v2, rel); err != nil {
		t.Fatal(err)
	}
	row, v3, err := s.Read(ctx, "s1")
	if err != nil || row.Owner != "" || row.Epoch != 1 || row.Release == nil || row.Release.AtUnixNS != 42 {
		t.Fatalf("released: %+v %v", row, err)
	}
	if l := getLease(t, api, ns, "plant.s1"); holder(l) != "" || l.Spec.LeaseDurationSeconds != nil {
		t.Fatalf("released Lease spec: %+v", l.Spec)
	}
	v4, err := s.CompareAndSwap(ctx, "s1", v3, b)
	if err != nil {
		t.Fatal(err)
	}
	if row, _, _ := s.Read(ctx, "s1"); row.Release != nil || row.Owner != b.Owner {
		t.Fatalf("taken over: %+v", row)
	}
	l = getLease(t, api, ns, "plant.s1")
	if holder(l) != "node-b/1" || transitions(l) != 1 || !l.Spec.AcquireTime.After(acquired) {
		t.Fatalf("Lease spec after takeover: %+v (acquired first %v)", l.Spec, acquired)
	}

	// Deleted behind the store's back: a stale write never recreates it.
	if err := api.Admin().CoordinationV1().Leases(ns).Delete(ctx, "plant.s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "s1", v4, b); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("write to a deleted row: %v, want ErrConflict", err)
	}
	if _, v, err := s.Read(ctx, "s1"); err != nil || v != 0 {
		t.Fatalf("deleted row: version %d %v", v, err)
	}
	if v5, err := s.CompareAndSwap(ctx, "s1", 0, b); err != nil || v5 <= v4 {
		t.Fatalf("recreate: %d after %d, %v", v5, v4, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// One LIST reads every row of the fleet and nothing of another fleet; a
// Lease of the fleet that is not a row is reported for its key only.
func TestReadPrefix(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("bulk")
	s := newStore(t, api, testkube.AdminToken, ns, "/plant/")
	other := newStore(t, api, testkube.AdminToken, ns, "/other/")
	ctx := ctxT(t)
	want := map[string]int64{}
	for _, k := range []string{"s1", "s2", "Odd_Session.1"} {
		v, err := s.CompareAndSwap(ctx, k, 0, lease.Row{Owner: "n/1", Node: "n", Epoch: 7, Timing: timing})
		if err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	if _, err := other.CompareAndSwap(ctx, "s1", 0, lease.Row{Owner: "x/1", Node: "x", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	bad := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "plant.bad", Labels: map[string]string{
		kubestore.LabelFleet: "plant", kubestore.LabelKind: "row"},
		Annotations: map[string]string{kubestore.AnnotationKey: "bad", kubestore.AnnotationKeyPrefix: "/plant/", kubestore.AnnotationEpoch: "x"}}}
	if _, err := api.Admin().CoordinationV1().Leases(ns).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadPrefix(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got["bad"].Err == nil {
		t.Fatalf("ReadPrefix: %+v, want the three rows and the bad one", got)
	}
	for k, v := range want {
		if r := got[k]; r.Err != nil || r.Version != v || r.Row.Owner != "n/1" || r.Row.Epoch != 7 {
			t.Errorf("%s: %+v, want version %d", k, r, v)
		}
		row, rv, err := s.Read(ctx, k)
		if err != nil || rv != v || row.Owner != got[k].Row.Owner {
			t.Errorf("Read %s: %+v %d %v", k, row, rv, err)
		}
	}
}

// An endpoint claim: another fleet's live claim refuses the claim and
// names its holder; the same fleet and session take it over; once the
// holder's row stops changing for the claim's duration the claim is dead
// and taken; release frees it.
func TestClaims(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("claims")
	a := newStore(t, api, testkube.AdminToken, ns, "/plant/")
	b := newStore(t, api, testkube.AdminToken, ns, "/other/")
	ctx := ctxT(t)
	row := lease.Row{Owner: "a/1", Node: "a", Epoch: 1, Timing: timing}
	v, err := a.CompareAndSwap(ctx, "s1", 0, row)
	if err != nil {
		t.Fatal(err)
	}
	ca := lease.Claim{KeyPrefix: "/plant/", Session: "s1", Node: "a", Owner: "a/1"}
	if _, err := a.Claim(ctx, []string{"tcp://plc:502"}, ca, time.Second); err != nil {
		t.Fatal(err)
	}
	cb := lease.Claim{KeyPrefix: "/other/", Session: "s9", Node: "b", Owner: "b/1"}
	_, err = b.Claim(ctx, []string{"tcp://other:502", "tcp://plc:502"}, cb, time.Second)
	var conflict *lease.ClaimConflict
	if !errors.As(err, &conflict) || conflict.Holder.Owner != "a/1" || conflict.Endpoint != "tcp://plc:502" {
		t.Fatalf("claim of a live claim: %v", err)
	}
	// All or none: the first endpoint's claim was given back.
	if l := getLease(t, api, ns, kubestore.ClaimName("tcp://other:502")); holder(l) != "" {
		t.Fatalf("partial claim kept: %+v", l.Spec)
	}
	// The same fleet and session (a successor) takes it over.
	ca2 := ca
	ca2.Owner, ca2.Node = "c/1", "c"
	release, err := a.Claim(ctx, []string{"tcp://plc:502"}, ca2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := getLease(t, api, ns, kubestore.ClaimName("tcp://plc:502")); holder(l) != "" || transitions(l) != 1 {
		t.Fatalf("released claim: %+v", l.Spec)
	}
	// a/1 claims again and keeps renewing; then its row stops changing.
	if _, err := a.Claim(ctx, []string{"tcp://plc:502"}, ca, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err = a.CompareAndSwap(ctx, "s1", v, row); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := b.Claim(ctx, []string{"tcp://plc:502"}, cb, time.Second)
		if err == nil {
			break
		}
		if !errors.As(err, &conflict) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the observation interval of a poller
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("a claim whose holder's row had not changed for %v was taken: shorter than its 1 s", d)
	}
	if l := getLease(t, api, ns, kubestore.ClaimName("tcp://plc:502")); holder(l) != "b/1" {
		t.Fatalf("dead claim not taken: %+v", l.Spec)
	}
}

// The Role of examples/kubernetes/lease-rbac.yaml is all the store needs,
// and a Role without one verb is refused by CheckAccess naming it.
func TestRoleSufficesAndMissingVerbNamed(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("rbac")
	role := api.ApplyRole("../../examples/kubernetes/lease-rbac.yaml", ns)
	s := newStore(t, api, testkube.UserToken, ns, "/plant/")
	ctx := ctxT(t)
	waitAccess(t, s, func(err error) bool { return err == nil })
	v, err := s.CompareAndSwap(ctx, "s1", 0, lease.Row{Owner: "a/1", Node: "a", Epoch: 1, Timing: timing})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "s1", v, lease.Row{Owner: "a/1", Node: "a", Epoch: 1, Timing: timing}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadPrefix(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, []string{"tcp://plc:502"}, lease.Claim{KeyPrefix: "/plant/", Session: "s1", Owner: "a/1"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	role.Rules[0].Verbs = []string{"get", "list", "watch", "create"}
	if _, err := api.Admin().RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = waitAccess(t, s, func(err error) bool { return err != nil })
	if !errors.Is(err, kubestore.ErrForbidden) || !strings.Contains(err.Error(), "missing verb(s) patch on leases") {
		t.Fatalf("CheckAccess without patch: %v", err)
	}
}

// waitAccess calls CheckAccess until done accepts its result (RBAC
// changes reach the authorizer through an informer) and returns it.
func waitAccess(t *testing.T, s *kubestore.Store, done func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.CheckAccess(ctxT(t))
		if done(err) || time.Now().After(deadline) {
			if !done(err) {
				t.Fatalf("CheckAccess: %v", err)
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
