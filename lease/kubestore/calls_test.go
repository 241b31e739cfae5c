package kubestore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testkube"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/kubestore"
)

// A write whose response is lost is an unknown outcome (lease.ErrUnavailable,
// never ErrConflict), and the authoritative read that resolves it shows it
// landed.
func TestLostResponseIsUnknownOutcome(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("lost")
	ctx := ctxT(t)
	px, err := faultproxy.Start(ctx, api.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	s, err := kubestore.New(kubestore.Config{Namespace: ns, Kubeconfig: api.Kubeconfig(testkube.AdminToken, px.Addr(), ns),
		KeyPrefix: "/plant/", CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a := lease.Row{Owner: "a/1", Node: "a", Epoch: 1, Timing: timing}
	v, err := s.CompareAndSwap(ctx, "s1", 0, a)
	if err != nil {
		t.Fatal(err)
	}
	// The request goes out on the connection the create left idle; only
	// the answer is lost.
	if err := px.SetMode(faultproxy.DropResponses); err != nil {
		t.Fatal(err)
	}
	b := lease.Row{Owner: "b/1", Node: "b", Epoch: 2, Timing: timing}
	_, err = s.CompareAndSwap(ctx, "s1", v, b)
	if err == nil || errors.Is(err, lease.ErrConflict) || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("write with its response lost: %v, want lease.ErrUnavailable", err)
	}
	if err := px.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	row, v2, err := s.ReadAuthoritative(ctx, "s1")
	if err != nil || v2 <= v || row.Owner != "b/1" || row.Epoch != 2 {
		t.Fatalf("authoritative read after the lost response: %+v at %d (%v), want b/1 epoch 2 above %d", row, v2, err, v)
	}
}

// client-go's rate limiter is off: 100 concurrent reads, as many
// standbys or renewals at once, all answer within a deadline that its
// default limiter (5 requests/s, burst 10) would have them miss by 8 s.
func TestNoClientRateLimiter(t *testing.T) {
	api := testkube.Start(t)
	ns := api.Namespace("qps")
	s := newStore(t, api, testkube.AdminToken, ns, "/plant/")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 100 {
		wg.Go(func() {
			if _, _, err := s.Read(ctx, "s1"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a concurrent read failed: %v", err)
	}
}
