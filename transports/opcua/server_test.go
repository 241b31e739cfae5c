package opcua

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
)

type rig struct {
	srv   *uatest.Server
	proxy *faultproxy.Proxy
	tr    *Transport
	owner context.Context
	stop  context.CancelFunc
	// halfOpen excuses a test that partitions the link: the server keeps
	// a connection the bridge has already closed.
	halfOpen bool
}

// newRig builds a transport reaching srv through its proxy; own gives it
// a proxy of its own instead (whose URL the server does not advertise).
func newRig(t *testing.T, srv *uatest.Server, dev *routes.Device, own ...bool) *rig {
	t.Helper()
	px := srv.Proxy
	if len(own) > 0 && own[0] {
		var err error
		if px, err = faultproxy.Start(context.Background(), "127.0.0.1:"+strconv.Itoa(srv.Port)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
	}
	dev.Kind = routes.KindOPCUA
	dev.Address = "opc.tcp://" + px.Addr()
	tr, err := New("ua1", dev)
	if err != nil {
		t.Fatal(err)
	}
	owner, stop := context.WithCancel(context.Background())
	r := &rig{srv: srv, proxy: px, tr: tr, owner: owner, stop: stop}
	t.Cleanup(func() {
		stop()
		_ = tr.Close(context.Background())
		// The endpoint query and the session use one connection after the
		// other, never two at once.
		if peak := px.Peak(); peak > 1 && !r.halfOpen {
			t.Errorf("server saw %d concurrent connections, want at most 1", peak)
		}
	})
	return r
}

func (r *rig) open(t *testing.T) {
	t.Helper()
	if err := r.tr.Open(r.owner); err != nil {
		t.Fatalf("Open: %v", err)
	}
}

func (r *rig) poll(t *testing.T, group string) map[string]transports.Value {
	t.Helper()
	vals, err := r.tr.Poll(context.Background(), group)
	if err != nil {
		t.Fatalf("Poll %s: %v", group, err)
	}
	m := map[string]transports.Value{}
	for _, v := range vals {
		m[v.Tag] = v
	}
	return m
}

// waitConns waits until the proxy holds n connections.
func (r *rig) waitConns(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.proxy.WaitFor(ctx, func(s faultproxy.Stats) bool { return s.Current == n }); err != nil {
		t.Fatalf("waiting for %d connections: %+v", n, r.proxy.Stats())
	}
}

func ptr[T any](v T) *T { return &v }

func mustGood(t *testing.T, vals map[string]transports.Value, name string, want any) {
	t.Helper()
	v, ok := vals[name]
	if !ok {
		t.Fatalf("tag %s missing", name)
	}
	if v.Quality != transports.Good || v.Err != nil || v.Timestamp.IsZero() {
		t.Fatalf("tag %s: quality %s, err %v, time %v", name, v.Quality, v.Err, v.Timestamp)
	}
	if fmt.Sprintf("%T %v", v.Value, v.Value) != fmt.Sprintf("%T %v", want, want) {
		t.Errorf("tag %s = %T %v, want %T %v", name, v.Value, v.Value, want, want)
	}
}
