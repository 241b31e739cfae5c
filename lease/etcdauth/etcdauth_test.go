package etcdauth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdauth"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/lease/fleetca"
)

const prefix = "/leasebridge/plant-b/"

// fleet is testetcd's fleet with clients of its certificates.
type fleet struct{ *testetcd.Fleet }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	return &fleet{testetcd.StartFleet(t, 3)}
}

// client connects with a certificate of kind and name from dir.
func (f *fleet) client(t *testing.T, dir string, kind fleetca.Kind, name string) *clientv3.Client {
	t.Helper()
	files := fleetca.FilesOf(dir, kind, name)
	tlsCfg, err := transport.TLSInfo{CertFile: files.Cert, KeyFile: files.Key, TrustedCAFile: fleetca.CAFiles(f.Dir).Cert}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: f.ClientURLs, TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// store opens lease/etcdstore as a bridge or reader does.
func (f *fleet) store(t *testing.T, kind fleetca.Kind, name string) *etcdstore.Store {
	t.Helper()
	files := fleetca.FilesOf(f.Dir, kind, name)
	st, err := etcdstore.New(t.Context(), etcdstore.Config{
		Endpoints: f.ClientURLs, DialTimeout: 10 * time.Second, KeyPrefix: prefix, CallTimeout: 10 * time.Second,
		CertFile: files.Cert, KeyFile: files.Key, CAFile: fleetca.CAFiles(f.Dir).Cert,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// denied tells etcd's permission denied, however deeply wrapped.
func denied(err error) bool {
	return err != nil && strings.Contains(err.Error(), rpctypes.ErrPermissionDenied.Error())
}

// With the roles on, a bridge certificate writes rows and claims, a
// reader certificate reads them and writes nothing, a fleet certificate
// with no role reads nothing, and the admin certificate can run the roles
// again to add a reader.
func TestRolesSeparateBridgesAndReaders(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		kind fleetca.Kind
		name string
	}{{fleetca.Bridge, "gw-1"}, {fleetca.Reader, "scada"}, {fleetca.Reader, "ops"}, {fleetca.Bridge, "stranger"}, {fleetca.Admin, ""}} {
		_, err := fleetca.Issue(f.Dir, c.kind, c.name, nil, time.Now())
		must(t, err)
	}
	// Before authentication is on, any fleet certificate may set it up.
	if err := etcdauth.EnsureRoles(ctx, f.client(t, f.Dir, fleetca.Member, "gw-0"), prefix, []string{"gw-1"}, []string{"scada"}); err != nil {
		t.Fatal(err)
	}

	bridge := f.store(t, fleetca.Bridge, "gw-1")
	row := lease.Row{Owner: "gw-1#1", Node: "gw-1", Epoch: 1}
	if _, err := bridge.CompareAndSwap(ctx, "line-1", 0, row); err != nil {
		t.Fatalf("bridge write: %v", err)
	}
	if err := bridge.PutNode(ctx, lease.NodeRow{Node: "gw-1", Owner: "gw-1#1"}); err != nil {
		t.Fatalf("bridge node row: %v", err)
	}
	// A handover request lives under an etcd lease: granting it is allowed.
	if err := bridge.RequestHandover(ctx, lease.HandoverRequest{Session: "line-1", Epoch: 1, Owner: "gw-1#1"}, time.Minute); err != nil {
		t.Fatalf("bridge handover request: %v", err)
	}
	cli := f.client(t, f.Dir, fleetca.Bridge, "gw-1")
	if _, err := cli.Put(ctx, etcdstore.ClaimKey("modbus-tcp://10.0.0.5:502"), "x"); err != nil {
		t.Fatalf("bridge claim: %v", err)
	}
	if _, err := cli.Put(ctx, "/elsewhere", "x"); !denied(err) {
		t.Errorf("bridge write outside the fleet's key spaces: %v, want permission denied", err)
	}

	reader := f.store(t, fleetca.Reader, "scada")
	got, _, err := reader.Read(ctx, "line-1")
	if err != nil || got.Owner != row.Owner {
		t.Fatalf("reader read: %+v, %v", got, err)
	}
	if _, err := reader.CompareAndSwap(ctx, "line-1", 0, lease.Row{Owner: "scada#1", Node: "scada", Epoch: 2}); !denied(err) {
		t.Errorf("reader write: %v, want permission denied", err)
	}
	rcli := f.client(t, f.Dir, fleetca.Reader, "scada")
	if _, err := rcli.Delete(ctx, prefix, clientv3.WithPrefix()); !denied(err) {
		t.Errorf("reader delete: %v, want permission denied", err)
	}

	// A certificate of the fleet whose name has no role reads nothing.
	if _, err := f.client(t, f.Dir, fleetca.Bridge, "stranger").Get(ctx, prefix+"line-1"); err == nil {
		t.Error("a certificate with no user read a row")
	}
	// Once on, the roles need root: the admin certificate, not a bridge.
	if err := etcdauth.EnsureRoles(ctx, cli, prefix, []string{"gw-1"}, []string{"ops"}); err == nil {
		t.Error("a bridge certificate changed the roles")
	}
	if err := etcdauth.EnsureRoles(ctx, f.client(t, f.Dir, fleetca.Admin, ""), prefix, []string{"gw-1"}, []string{"ops"}); err != nil {
		t.Fatalf("admin adds a reader: %v", err)
	}
	if resp, err := f.client(t, f.Dir, fleetca.Reader, "ops").Get(ctx, prefix+"line-1"); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("added reader: %v, %v", resp, err)
	}
}

// http2Hello is an HTTP/2 client preface and an empty SETTINGS frame: the
// gRPC server behind a client port answers it with its own SETTINGS.
const http2Hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// handshake dials rawURL with files, says hello and reads one byte: with
// TLS 1.3 the server's verdict on the client certificate arrives only
// after the client's side of the handshake is done.
func handshake(t *testing.T, rawURL string, files fleetca.Files, caDir string) error {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := fleetca.LoadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	u, _ := url.Parse(rawURL)
	d := tls.Dialer{Config: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, NextProtos: []string{"h2"}}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2Hello)); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// A certificate from another CA is refused at the TLS handshake, on the
// client port (a bridge) and on the peer port (a member), and so can
// neither read nor write rows; the fleet's own passes the same handshake.
func TestCertificateFromAnotherCARefused(t *testing.T) {
	f := startFleet(t)
	other := filepath.Join(t.TempDir(), "other")
	_, err := fleetca.Init(other, time.Now())
	must(t, err)
	foreignBridge, err := fleetca.Issue(other, fleetca.Bridge, "gw-1", nil, time.Now())
	must(t, err)
	foreignMember, err := fleetca.Issue(other, fleetca.Member, "gw-3", []string{"127.0.0.1"}, time.Now())
	must(t, err)
	own, err := fleetca.Issue(f.Dir, fleetca.Bridge, "gw-1", nil, time.Now())
	must(t, err)

	for _, c := range []struct {
		what, url string
		files     fleetca.Files
	}{{"bridge, client port", f.ClientURLs[0], foreignBridge}, {"member, peer port", f.PeerURLs[1], foreignMember}} {
		// The server's alert: crypto/tls has no exported type for it on TCP.
		err := handshake(t, c.url, c.files, f.Dir)
		if err == nil || !strings.Contains(err.Error(), "remote error: tls: ") {
			t.Errorf("%s: %v, want a TLS alert from the server", c.what, err)
			continue
		}
		t.Logf("%s refused: %v", c.what, err)
	}
	// The same hello with the fleet's certificate gets an answer.
	if err := handshake(t, f.ClientURLs[0], own, f.Dir); err != nil {
		t.Errorf("own certificate: %v, want the server's SETTINGS", err)
	}
	tlsCfg, err := transport.TLSInfo{CertFile: foreignBridge.Cert, KeyFile: foreignBridge.Key, TrustedCAFile: fleetca.CAFiles(f.Dir).Cert}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: f.ClientURLs, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, prefix+"line-1", "x"); err == nil {
		t.Error("a certificate from another CA wrote a row")
	}
}
