package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
)

// With authentication, New must fetch a token: a wrong password is
// ErrAuth (a configuration mistake), an unreachable store is
// lease.ErrUnavailable (an outage), and the right password answers Ping.
func TestAuthRefusedOrUnreachable(t *testing.T) {
	c := testetcd.StartEmbedded(t, 1)
	ctx := context.Background()
	if err := c.EnableAuth(ctx, "s3cret"); err != nil {
		t.Fatal(err)
	}
	cfg := etcdstore.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Username: "root", Password: "wrong"}
	if _, err := etcdstore.New(ctx, cfg); !errors.Is(err, etcdstore.ErrAuth) {
		t.Errorf("wrong password: %v, want ErrAuth", err)
	}
	cfg.Password = "s3cret"
	s, err := etcdstore.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
	cfg.Endpoints, cfg.DialTimeout = []string{"http://" + testbin.FreeAddr(t)}, 300*time.Millisecond
	if _, err := etcdstore.New(ctx, cfg); !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, etcdstore.ErrAuth) {
		t.Errorf("unreachable: %v, want lease.ErrUnavailable", err)
	}
}
