package testbin

import (
	"context"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
)

// The real peers of a bridge under test, each stopped when tb ends.

// StartEtcd runs a single-member etcd with its data in dir.
func StartEtcd(tb testing.TB, dir string) *etcdembed.Server {
	tb.Helper()
	e, err := etcdembed.Start(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return e
}

// StartBroker runs an embedded MQTT broker on a free loopback port.
func StartBroker(tb testing.TB) *embedbroker.Broker {
	tb.Helper()
	b, err := embedbroker.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// StartPLC runs a simulated Modbus PLC whose counter advances every tick.
func StartPLC(tb testing.TB, tick time.Duration) *plcsim.PLC {
	tb.Helper()
	p, err := plcsim.Start(context.Background(), tick)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}
