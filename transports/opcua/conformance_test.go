package opcua

import (
	"testing"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Kind{
		Server: func(t *testing.T) *faultproxy.Proxy {
			srv := uatest.Start(t)
			srv.Space.Set("x", int32(1))
			return srv.Proxy
		},
		New: func(t *testing.T, addr string, b transporttest.Bounds) transporttest.Device {
			tr, err := New("ua1", b.Device(Kind, "opc.tcp://"+addr, routes.Tag{Address: "ns=1;s=x"}))
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		Value:  int32(2),
		Closed: ErrClosed,
	})
}
