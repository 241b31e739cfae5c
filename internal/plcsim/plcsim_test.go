package plcsim

import (
	"context"
	"testing"
	"time"

	"github.com/goburrow/modbus"
)

func TestCounterMovesAndWritesStick(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := Start(ctx, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := modbus.NewTCPClientHandler(p.Addr())
	h.Timeout = 2 * time.Second
	if err := h.Connect(); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c := modbus.NewClient(h)
	first, err := c.ReadHoldingRegisters(CounterRegister, 1)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		again, err := c.ReadHoldingRegisters(CounterRegister, 1)
		if err != nil {
			t.Fatal(err)
		}
		if again[1] != first[1] || again[0] != first[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("counter register never moved")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.WriteSingleRegister(SetpointRegister, 4242); err != nil {
		t.Fatal(err)
	}
	if got := p.Holding(SetpointRegister); got != 4242 {
		t.Fatalf("setpoint = %d, want 4242", got)
	}
	if _, err := c.ReadHoldingRegisters(60, 10); err == nil {
		t.Fatal("read past the register map succeeded")
	}
	if peak := p.Proxy().Peak(); peak != 1 {
		t.Fatalf("proxy peak connections = %d, want 1", peak)
	}
}
