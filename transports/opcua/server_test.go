package opcua

import (
	"context"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
	"github.com/leasebridge/leasebridge/transports/transporttest"
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

// newRig builds a transport reaching srv through its proxy.
func newRig(t *testing.T, srv *uatest.Server, dev *routes.Device) *rig {
	t.Helper()
	px := srv.Proxy
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
	return transporttest.Poll(t, r.tr, group)
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

var mustGood = transporttest.MustGood
