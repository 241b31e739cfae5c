package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
)

// TestTLSAndAuth runs the store against an etcd that requires a client
// certificate and password authentication.
func TestTLSAndAuth(t *testing.T) {
	server, client := testetcd.WritePKI(t)
	c := testetcd.StartEmbeddedTLS(t, 1, server)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tlsCfg, err := transport.TLSInfo{CertFile: client.CertFile, KeyFile: client.KeyFile, TrustedCAFile: client.CAFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, _ = admin.RoleAdd(ctx, "root") // may exist already
	if _, err := admin.UserAdd(ctx, "root", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := etcdstore.Config{
		Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		CertFile: client.CertFile, KeyFile: client.KeyFile, CAFile: client.CAFile,
		Username: "root", Password: "s3cret", KeyPrefix: "/lb/", CallTimeout: 2 * time.Second,
	}
	st, err := etcdstore.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	row := lease.Row{Owner: "a#1", Node: "a", Epoch: 1}
	v, err := st.CompareAndSwap(ctx, "s", 0, row)
	if err != nil {
		t.Fatal(err)
	}
	got, ver, err := st.Read(ctx, "s")
	if err != nil || got.RenewedAt <= 0 || ver != v {
		t.Fatalf("read %+v@%d, %v; want renewed_at stamped at version %d", got, ver, err, v)
	}
	if got.RenewedAt = 0; got != row {
		t.Fatalf("read %+v@%d, %v; want %+v@%d", got, ver, err, row, v)
	}
	if _, err := st.CompareAndSwap(ctx, "s", 0, row); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("CAS on a stale version: %v, want ErrConflict", err)
	}
	if err := st.Release(ctx, "s", v, lease.Row{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := st.ReadAuthoritative(ctx, "s"); err != nil || (lease.Row{Owner: got.Owner, Node: got.Node, Epoch: got.Epoch}) != (lease.Row{Epoch: 1}) {
		t.Fatalf("after release %+v, %v; want empty owner, epoch kept", got, err)
	}

	bad := cfg
	bad.Password = "wrong"
	if s, err := etcdstore.New(ctx, bad); err == nil {
		_, _, err = s.Read(ctx, "s")
		s.Close()
		if err == nil {
			t.Fatal("wrong password accepted")
		}
	}
	noCert := cfg
	noCert.CertFile, noCert.KeyFile = "", ""
	noCert.DialTimeout = time.Second
	if s, err := etcdstore.New(ctx, noCert); err == nil {
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, _, err = s.Read(short, "s")
		cancel()
		s.Close()
		if err == nil {
			t.Fatal("connection without a client certificate accepted")
		}
	}
}
