// Package plcsim is a simulated PLC: a real Modbus TCP server (simonvetter)
// with a register map that moves on its own, behind a connection-counting
// proxy so "a device never sees two clients" can be watched and asserted.
// The demo, the supervisor tests, the failover lab and cmd/plcsim (the
// simulator for hand trials) use it.
package plcsim

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"time"

	mbserver "github.com/simonvetter/modbus"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
)

// Registers the simulation drives.
const (
	// CounterRegister (holding) counts simulated machine cycles, +1 per tick.
	CounterRegister = 0
	// SetpointRegister (holding) is writable and keeps what was written.
	SetpointRegister = 1
	// RunningCoil is true while the machine runs.
	RunningCoil = 0
)

// PLC is a running simulated PLC.
type PLC struct {
	server *mbserver.ModbusServer
	proxy  *faultproxy.Proxy
	cancel context.CancelFunc
	done   chan struct{}

	onRequest func(Request)
	listen    string

	mu      sync.Mutex
	holding [64]uint16
	coils   [16]bool
	writes  []Write
}

// Request is one request the PLC answered, for a request log: what a
// client asked, from where, and when.
type Request struct {
	At time.Time
	// Client is the client's address as the Modbus server saw it.
	Client string
	// Func is read_coils, write_coils, read_discrete_inputs,
	// read_holding, write_holding or read_input.
	Func     string
	Addr     uint16
	Quantity uint16
	// Values are the registers (or coils as 0/1) written, or read.
	Values []uint16
	// Err is the Modbus exception answered, empty on success.
	Err string
}

// Options configure StartWith.
type Options struct {
	// Listen is the Modbus server's host:port; empty picks a free
	// loopback port.
	Listen string
	// Tick is the counter register's period.
	Tick time.Duration
	// OnRequest, when set, is called for every request served, in order,
	// from the server's goroutines; it must not block for long.
	OnRequest func(Request)
}

// Write is one write request the PLC served: the device-side witness of
// what reached it.
type Write struct {
	At time.Time
	// Addr is the first holding register or coil written; Values the
	// registers written (Coil false) or the coils as 0/1 (Coil true).
	Addr   uint16
	Values []uint16
	Coil   bool
}

// Writes returns every write request served so far, in order.
func (p *PLC) Writes() []Write {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Write(nil), p.writes...)
}

// Start listens on a free loopback port, puts a counting proxy in front and
// advances the counter every tick until ctx ends or Close is called.
func Start(ctx context.Context, tick time.Duration) (*PLC, error) {
	return StartWith(ctx, Options{Tick: tick})
}

// StartWith is Start with a chosen server address and a request log.
func StartWith(ctx context.Context, o Options) (*PLC, error) {
	listen := o.Listen
	if listen == "" {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		listen = fmt.Sprintf("127.0.0.1:%d", port)
	}
	if o.Tick <= 0 {
		return nil, fmt.Errorf("plcsim: tick %v: want a positive period", o.Tick)
	}
	p := &PLC{done: make(chan struct{}), onRequest: o.OnRequest, listen: listen}
	p.coils[RunningCoil] = true
	srv, err := mbserver.NewServer(&mbserver.ServerConfiguration{
		URL:        "tcp://" + listen,
		Timeout:    time.Minute,
		MaxClients: 16,
		Logger:     log.New(io.Discard, "", 0),
	}, p)
	if err != nil {
		return nil, fmt.Errorf("plcsim: server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("plcsim: start on %s: %w", listen, err)
	}
	p.server = srv
	p.proxy, err = faultproxy.Start(ctx, listen)
	if err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("plcsim: proxy: %w", err)
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go p.run(ctx, o.Tick)
	return p, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("plcsim: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (p *PLC) run(ctx context.Context, tick time.Duration) {
	defer close(p.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.mu.Lock()
			p.holding[CounterRegister]++
			p.mu.Unlock()
		}
	}
}

// Addr is where bridges connect: the counting proxy.
func (p *PLC) Addr() string { return p.proxy.Addr() }

// ServerAddr is the Modbus server itself, host:port, without the proxy.
func (p *PLC) ServerAddr() string { return p.listen }

// Proxy exposes the connection counters and fault modes.
func (p *PLC) Proxy() *faultproxy.Proxy { return p.proxy }

// Holding returns a holding register's value.
func (p *PLC) Holding(addr int) uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding[addr]
}

// Close stops the simulation, the proxy and the server.
func (p *PLC) Close() error {
	p.cancel()
	<-p.done
	perr := p.proxy.Close()
	if err := p.server.Stop(); err != nil {
		return fmt.Errorf("plcsim: stop: %w", err)
	}
	return perr
}

func inRange(addr, qty uint16, size int) error {
	if int(addr)+int(qty) > size {
		return mbserver.ErrIllegalDataAddress
	}
	return nil
}

// note reports one served request to OnRequest, outside p.mu.
func (p *PLC) note(fn string, addr, qty uint16, client string, values []uint16, err error) {
	if p.onRequest == nil {
		return
	}
	r := Request{At: time.Now(), Client: client, Func: fn, Addr: addr, Quantity: qty, Values: values}
	if err != nil {
		r.Err = err.Error()
	}
	p.onRequest(r)
}

func bits(bs []bool) []uint16 {
	out := make([]uint16, len(bs))
	for i, b := range bs {
		if b {
			out[i] = 1
		}
	}
	return out
}

// HandleCoils serves the coils.
func (p *PLC) HandleCoils(req *mbserver.CoilsRequest) (res []bool, err error) {
	if req.IsWrite {
		defer func() { p.note("write_coils", req.Addr, req.Quantity, req.ClientAddr, bits(req.Args), err) }()
	} else {
		defer func() { p.note("read_coils", req.Addr, req.Quantity, req.ClientAddr, bits(res), err) }()
	}
	if err := inRange(req.Addr, req.Quantity, len(p.coils)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.IsWrite {
		copy(p.coils[req.Addr:], req.Args)
		p.writes = append(p.writes, Write{At: time.Now(), Addr: req.Addr, Coil: true, Values: bits(req.Args)})
		return nil, nil
	}
	return append([]bool(nil), p.coils[req.Addr:req.Addr+req.Quantity]...), nil
}

// HandleDiscreteInputs mirrors the coils.
func (p *PLC) HandleDiscreteInputs(req *mbserver.DiscreteInputsRequest) (res []bool, err error) {
	defer func() { p.note("read_discrete_inputs", req.Addr, req.Quantity, req.ClientAddr, bits(res), err) }()
	if err := inRange(req.Addr, req.Quantity, len(p.coils)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.coils[req.Addr:req.Addr+req.Quantity]...), nil
}

// HandleHoldingRegisters serves and stores the holding registers.
func (p *PLC) HandleHoldingRegisters(req *mbserver.HoldingRegistersRequest) (res []uint16, err error) {
	if req.IsWrite {
		defer func() { p.note("write_holding", req.Addr, req.Quantity, req.ClientAddr, req.Args, err) }()
	} else {
		defer func() { p.note("read_holding", req.Addr, req.Quantity, req.ClientAddr, res, err) }()
	}
	if err := inRange(req.Addr, req.Quantity, len(p.holding)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.IsWrite {
		copy(p.holding[req.Addr:], req.Args)
		p.writes = append(p.writes, Write{At: time.Now(), Addr: req.Addr, Values: append([]uint16(nil), req.Args...)})
		return nil, nil
	}
	return append([]uint16(nil), p.holding[req.Addr:req.Addr+req.Quantity]...), nil
}

// HandleInputRegisters mirrors the holding registers.
func (p *PLC) HandleInputRegisters(req *mbserver.InputRegistersRequest) (res []uint16, err error) {
	defer func() { p.note("read_input", req.Addr, req.Quantity, req.ClientAddr, res, err) }()
	if err := inRange(req.Addr, req.Quantity, len(p.holding)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint16(nil), p.holding[req.Addr:req.Addr+req.Quantity]...), nil
}
