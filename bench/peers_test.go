// Package bench holds leasebridge's benchmarks, each with its baseline in
// the same run: the Modbus poll -> MQTT publish data plane against a raw
// goburrow + paho loop on the same peers, `leasebridge admit` on a
// generated 1,000-route / 200-session configuration, and one process
// holding 1,000 sessions. With LEASEBRIDGE_WRITE_DOCS=1 a benchmark run
// rewrites docs/benchmarks.md from the measured results:
//
//	LEASEBRIDGE_WRITE_DOCS=1 go test -run '^$' -bench . -benchtime 2s -count 3 -timeout 30m ./bench/
package bench

import (
	"io"
	"log"
	"sync"
	"sync/atomic"
	"testing"

	mbserver "github.com/simonvetter/modbus"

	"github.com/leasebridge/leasebridge/internal/testbin"
)

// registers is a Modbus server's register map; it counts the read
// requests it answers so both loops can be checked to do the same device
// work.
type registers struct {
	mu      sync.Mutex
	holding [64]uint16
	reads   atomic.Int64
}

// startModbus runs a Modbus TCP server (simonvetter, as the PLC simulator
// uses) on a free loopback port, accepting up to maxClients connections.
func startModbus(tb testing.TB, maxClients uint) (string, *registers) {
	tb.Helper()
	addr := testbin.FreeAddr(tb)
	regs := &registers{}
	for i := range regs.holding {
		regs.holding[i] = uint16(1000 + i)
	}
	srv, err := mbserver.NewServer(&mbserver.ServerConfiguration{URL: "tcp://" + addr, MaxClients: maxClients,
		Logger: log.New(io.Discard, "", 0)}, regs)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Stop() })
	return addr, regs
}

func (r *registers) HandleCoils(*mbserver.CoilsRequest) ([]bool, error) {
	return nil, mbserver.ErrIllegalFunction
}

func (r *registers) HandleDiscreteInputs(*mbserver.DiscreteInputsRequest) ([]bool, error) {
	return nil, mbserver.ErrIllegalFunction
}

func (r *registers) HandleInputRegisters(*mbserver.InputRegistersRequest) ([]uint16, error) {
	return nil, mbserver.ErrIllegalFunction
}

func (r *registers) HandleHoldingRegisters(req *mbserver.HoldingRegistersRequest) ([]uint16, error) {
	if int(req.Addr)+int(req.Quantity) > len(r.holding) {
		return nil, mbserver.ErrIllegalDataAddress
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.IsWrite {
		copy(r.holding[req.Addr:], req.Args)
		return nil, nil
	}
	r.reads.Add(1)
	r.holding[0]++ // a moving counter, like a machine's cycle count
	return append([]uint16(nil), r.holding[req.Addr:req.Addr+req.Quantity]...), nil
}
