package opcua

import (
	"testing"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

type rig struct {
	*transporttest.Rig[*Transport]
	srv *uatest.Server
}

// newRig builds a transport reaching srv through its proxy. The endpoint
// query and the session use one connection after the other, never two at
// once.
func newRig(t *testing.T, srv *uatest.Server, dev *routes.Device) *rig {
	t.Helper()
	dev.Kind = Kind
	dev.Address = "opc.tcp://" + srv.Proxy.Addr()
	tr, err := New("ua1", dev)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{Rig: transporttest.NewRig(t, srv.Proxy, tr), srv: srv}
}

func ptr[T any](v T) *T { return &v }

var mustGood = transporttest.MustGood
