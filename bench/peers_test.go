// Package bench holds leasebridge's benchmarks, each with its baseline in
// the same run: the Modbus poll -> MQTT publish data plane against a raw
// goburrow + paho loop on the same peers, `leasebridge admit` on a
// generated 1,000-route / 200-session configuration, and one process
// holding 1,000 sessions. With LEASEBRIDGE_WRITE_DOCS=1 a benchmark run
// merges its results into docs/benchmarks.md's raw results (replacing
// those of the benchmark functions it ran) and renders the page from them:
//
//	LEASEBRIDGE_WRITE_DOCS=1 go test -run '^$' -bench . -benchtime 2s -count 3 -timeout 30m ./bench/
package bench

import (
	"fmt"
	"io"
	"log"
	"net"
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
	regs := newRegisters()
	serveModbus(tb, addr, maxClients, regs)
	return addr, regs
}

// startModbusMany runs n Modbus TCP servers on one free port of n loopback
// addresses (127.0.1.1, 127.0.1.2, ...), sharing one register map:
// admission refuses two device entries with one endpoint, so each session
// of a many-session run needs a device of its own.
func startModbusMany(tb testing.TB, n int) []string {
	tb.Helper()
	_, port, err := net.SplitHostPort(testbin.FreeAddr(tb))
	if err != nil {
		tb.Fatal(err)
	}
	regs := newRegisters()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = net.JoinHostPort(fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250), port)
		serveModbus(tb, addrs[i], 2, regs)
	}
	return addrs
}

func newRegisters() *registers {
	regs := &registers{}
	for i := range regs.holding {
		regs.holding[i] = uint16(1000 + i)
	}
	return regs
}

func serveModbus(tb testing.TB, addr string, maxClients uint, regs *registers) {
	tb.Helper()
	srv, err := mbserver.NewServer(&mbserver.ServerConfiguration{URL: "tcp://" + addr, MaxClients: maxClients,
		Logger: log.New(io.Discard, "", 0)}, regs)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Stop() })
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
