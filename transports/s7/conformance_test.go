package s7

import (
	"testing"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/s7/s7test"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Kind{
		Server: func(t *testing.T) *faultproxy.Proxy {
			srv, err := s7test.Start(0, 1, 240)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			return transporttest.Proxy(t, srv.Addr())
		},
		New: func(t *testing.T, addr string, b transporttest.Bounds) transporttest.Device {
			dev := b.Device(Kind, addr, routes.Tag{Address: "MW0"})
			dev.Settings = &Config{Slot: 1}
			tr, err := New("plc7", dev)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		Value:  1,
		Closed: ErrClosed,
	})
}
