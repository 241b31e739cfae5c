package modbus

import (
	"context"
	"errors"
	"strings"
	"testing"

	mbserver "github.com/simonvetter/modbus"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

// gateway is a Modbus TCP gateway: one server, and so one connection, in
// front of a plc per unit id. A request to a unit it lacks is answered
// with exception 11, as a gateway whose target does not respond.
type gateway map[uint8]*plc

func (g gateway) unit(id uint8) (*plc, error) {
	if p, ok := g[id]; ok {
		return p, nil
	}
	return nil, mbserver.ErrGWTargetFailedToRespond
}

func (g gateway) HandleCoils(req *mbserver.CoilsRequest) ([]bool, error) {
	p, err := g.unit(req.UnitId)
	if err != nil {
		return nil, err
	}
	return p.HandleCoils(req)
}

func (g gateway) HandleDiscreteInputs(req *mbserver.DiscreteInputsRequest) ([]bool, error) {
	p, err := g.unit(req.UnitId)
	if err != nil {
		return nil, err
	}
	return p.HandleDiscreteInputs(req)
}

func (g gateway) HandleHoldingRegisters(req *mbserver.HoldingRegistersRequest) ([]uint16, error) {
	p, err := g.unit(req.UnitId)
	if err != nil {
		return nil, err
	}
	return p.HandleHoldingRegisters(req)
}

func (g gateway) HandleInputRegisters(req *mbserver.InputRegistersRequest) ([]uint16, error) {
	p, err := g.unit(req.UnitId)
	if err != nil {
		return nil, err
	}
	return p.HandleInputRegisters(req)
}

// requestsPerUnit is the unit ids p was addressed as, with their counts.
func (p *plc) requestsPerUnit() map[uint8]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[uint8]int{}
	for u, n := range p.units {
		out[u] = n
	}
	return out
}

// TestGatewayUnits: one device entry reaches two units behind one gateway
// over one connection. Each group's requests carry its unit_id, the
// device's by default; reads and writes land on that unit alone, as the
// units witness; a unit the gateway lacks spoils only its own group.
func TestGatewayUnits(t *testing.T) {
	u1, u2 := newPLC(), newPLC()
	u1.holding[10], u2.holding[10], u2.coils[3] = 111, 222, true
	px := transporttest.Proxy(t, startHandler(t, gateway{1: u1, 2: u2}).addr)
	tr, err := New("gw", &routes.Device{Kind: KindTCP, Address: px.Addr(), Groups: []*routes.PollGroup{
		{Name: "one", Tags: []*routes.Tag{{Name: "a", Address: "10", Writable: true}}},
		{Name: "two", Settings: &GroupConfig{UnitID: ptr(2)}, Tags: []*routes.Tag{
			{Name: "b", Address: "10", Writable: true},
			{Name: "c", Address: "3", Settings: &TagConfig{Register: "coil"}},
		}},
		{Name: "gone", Settings: &GroupConfig{UnitID: ptr(9)}, Tags: []*routes.Tag{{Name: "d", Address: "10"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := transporttest.NewRig(t, px, tr)
	r.Open(t)
	mustGood(t, r.Poll(t, "one"), "a", uint16(111))
	two := r.Poll(t, "two")
	mustGood(t, two, "b", uint16(222))
	mustGood(t, two, "c", true)

	if err := tr.Write(context.Background(), "b", 7); err != nil {
		t.Fatal(err)
	}
	if err := tr.Write(context.Background(), "a", 8); err != nil {
		t.Fatal(err)
	}
	u1.do(func() {
		if u1.holding[10] != 8 {
			t.Errorf("unit 1 register 10 = %d, want 8", u1.holding[10])
		}
	})
	u2.do(func() {
		if u2.holding[10] != 7 {
			t.Errorf("unit 2 register 10 = %d, want 7", u2.holding[10])
		}
	})

	vals, err := tr.Poll(r.Owner, "gone")
	var ex *ExceptionError
	if err != nil || vals[0].Quality != transports.Bad || !errors.As(vals[0].Err, &ex) || ex.Code != 11 {
		t.Fatalf("poll of a unit the gateway lacks: %+v, %v; want tag d Bad with exception 11", vals, err)
	}
	mustGood(t, r.Poll(t, "two"), "b", uint16(7))

	if got := u1.requestsPerUnit(); len(got) != 1 || got[1] == 0 {
		t.Errorf("unit 1 was addressed as %v, want unit 1 only", got)
	}
	if got := u2.requestsPerUnit(); len(got) != 1 || got[2] == 0 {
		t.Errorf("unit 2 was addressed as %v, want unit 2 only", got)
	}
	if st := px.Stats(); st.Accepted != 1 {
		t.Errorf("the gateway accepted %d connections, want 1 for every unit", st.Accepted)
	}
}

// A group's unit_id outside 0..255 is refused by the transport built in
// code, naming the group.
func TestGroupUnitIDRange(t *testing.T) {
	_, err := New("gw", &routes.Device{Kind: KindTCP, Address: "127.0.0.1:502", Groups: []*routes.PollGroup{
		{Name: "far", Settings: &GroupConfig{UnitID: ptr(256)}, Tags: []*routes.Tag{{Name: "x", Address: "1"}}},
	}})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `group "far": unit_id 256: want 0..255`) {
		t.Errorf("unit_id 256: %v", err)
	}
}
