package modbus

import (
	"testing"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Kind{
		Server: func(t *testing.T) *faultproxy.Proxy {
			return transporttest.Proxy(t, startServer(t, newPLC()).addr)
		},
		New: func(t *testing.T, addr string, b transporttest.Bounds) transporttest.Device {
			tr, err := New("plc1", b.Device(KindTCP, addr, routes.Tag{Address: "1"}))
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		Value:  1,
		Closed: ErrClosed,
	})
}
