package modbus

import (
	"context"
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	mbserver "github.com/simonvetter/modbus"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

// plc is the simulated device behind the simonvetter Modbus server.
type plc struct {
	mu       sync.Mutex
	holding  [65536]uint16
	input    [65536]uint16
	coils    [65536]bool
	discrete [65536]bool
	bad      map[uint16]bool // addresses answered with "illegal data address"
	hang     chan struct{}   // when non-nil, requests wait on it
	reads    int             // read requests served
	units    map[uint8]int   // requests per unit id
}

func newPLC() *plc { return &plc{bad: map[uint16]bool{}, units: map[uint8]int{}} }

func (p *plc) enter(unit uint8, addr, qty uint16, write bool) error {
	p.mu.Lock()
	hang := p.hang
	p.mu.Unlock()
	if hang != nil {
		<-hang
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.units[unit]++
	if !write {
		p.reads++
	}
	for a := int(addr); a < int(addr)+int(qty); a++ {
		if p.bad[uint16(a)] {
			return mbserver.ErrIllegalDataAddress
		}
	}
	return nil
}

func (p *plc) HandleCoils(req *mbserver.CoilsRequest) ([]bool, error) {
	if err := p.enter(req.UnitId, req.Addr, req.Quantity, req.IsWrite); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.IsWrite {
		copy(p.coils[req.Addr:], req.Args)
		return nil, nil
	}
	return append([]bool(nil), p.coils[req.Addr:int(req.Addr)+int(req.Quantity)]...), nil
}

func (p *plc) HandleDiscreteInputs(req *mbserver.DiscreteInputsRequest) ([]bool, error) {
	if err := p.enter(req.UnitId, req.Addr, req.Quantity, false); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.discrete[req.Addr:int(req.Addr)+int(req.Quantity)]...), nil
}

func (p *plc) HandleHoldingRegisters(req *mbserver.HoldingRegistersRequest) ([]uint16, error) {
	if err := p.enter(req.UnitId, req.Addr, req.Quantity, req.IsWrite); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.IsWrite {
		copy(p.holding[req.Addr:], req.Args)
		return nil, nil
	}
	return append([]uint16(nil), p.holding[req.Addr:int(req.Addr)+int(req.Quantity)]...), nil
}

func (p *plc) HandleInputRegisters(req *mbserver.InputRegistersRequest) ([]uint16, error) {
	if err := p.enter(req.UnitId, req.Addr, req.Quantity, false); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint16(nil), p.input[req.Addr:int(req.Addr)+int(req.Quantity)]...), nil
}

// setWire stores wire bytes into consecutive registers of a table.
func (p *plc) setWire(regs []uint16, addr int, wire []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(wire); i += 2 {
		regs[addr+i/2] = uint16(wire[i])<<8 | uint16(wire[i+1])
	}
}

// wire returns n registers of a table as wire bytes.
func (p *plc) wire(regs []uint16, addr, n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := make([]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		b = append(b, byte(regs[addr+i]>>8), byte(regs[addr+i]))
	}
	return b
}

// do runs f with the device locked, for changes while the server runs.
func (p *plc) do(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// stuckPoll makes the device stop answering until the test ends and
// starts a poll of group under ctx; the channel carries its error.
func (r *rig) stuckPoll(t *testing.T, p *plc, ctx context.Context, group string) <-chan error {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	p.do(func() { p.hang = hang })
	done := make(chan error, 1)
	go func() {
		_, err := r.Tr.Poll(ctx, group)
		done <- err
	}()
	return done
}

func (p *plc) readCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// server runs the simonvetter server on a fixed port so a test can stop and
// restart the device at the same address.
type server struct {
	t       *testing.T
	handler mbserver.RequestHandler
	addr    string
	srv     *mbserver.ModbusServer
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func startServer(t *testing.T, p *plc) *server {
	t.Helper()
	return startHandler(t, p)
}

// startHandler starts a server answering with h, such as a plc or a
// gateway of several.
func startHandler(t *testing.T, h mbserver.RequestHandler) *server {
	t.Helper()
	s := &server{t: t, handler: h, addr: freePort(t)}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) start() {
	s.t.Helper()
	srv, err := mbserver.NewServer(&mbserver.ServerConfiguration{
		URL:        "tcp://" + s.addr,
		MaxClients: 8,
		Timeout:    time.Minute,
		Logger:     log.New(io.Discard, "", 0),
	}, s.handler)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		s.t.Fatalf("start modbus server on %s: %v", s.addr, err)
	}
	s.srv = srv
}

func (s *server) stop() {
	if s.srv != nil {
		_ = s.srv.Stop()
		s.srv = nil
	}
}

// rig is a device transport reaching the server through a counting proxy.
type rig struct {
	*transporttest.Rig[*Transport]
	srv *server
}

func newRig(t *testing.T, p *plc, dev *routes.Device) *rig {
	t.Helper()
	srv := startServer(t, p)
	px := transporttest.Proxy(t, srv.addr)
	dev.Kind = KindTCP
	dev.Address = px.Addr()
	tr, err := New("plc1", dev)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{Rig: transporttest.NewRig(t, px, tr), srv: srv}
}

func ptr[T any](v T) *T { return &v }

var mustGood = transporttest.MustGood
