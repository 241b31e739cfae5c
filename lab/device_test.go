package lab

import (
	"context"
	"fmt"
	"io"
	"log"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mbserver "github.com/simonvetter/modbus"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// device is the lab's PLC: plcsim's registers served by a Modbus server
// that logs every request it handles with the client address it came from
// and the instant, in the order it handled them. That log is the witness
// of "a device never sees two clients": it is what the device itself saw,
// not what a proxy or a bridge reported. A counting proxy in front of it
// tells which proxied connection each client address belongs to.
type device struct {
	*plcsim.PLC
	server *mbserver.ModbusServer
	proxy  *faultproxy.Proxy

	mu   sync.Mutex
	reqs []devRequest
}

// devRequest is one request as the device handled it.
type devRequest struct {
	Seq    int
	At     time.Time
	Client string // the client address the device saw (the proxy's side)
}

func startDevice(ctx context.Context, t *testing.T) *device {
	t.Helper()
	plc, err := plcsim.Start(ctx, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plc.Close() })
	d := &device{PLC: plc}
	addr := testbin.FreeAddr(t)
	d.server, err = mbserver.NewServer(&mbserver.ServerConfiguration{URL: "tcp://" + addr, Timeout: time.Minute, MaxClients: 16,
		Logger: log.New(io.Discard, "", 0)}, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.server.Start(); err != nil {
		t.Fatalf("device on %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = d.server.Stop() })
	if d.proxy, err = faultproxy.Start(ctx, addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.proxy.Close() })
	return d
}

// Addr is where the bridges connect: the counting proxy.
func (d *device) Addr() string { return d.proxy.Addr() }

func (d *device) record(client string) {
	d.mu.Lock()
	d.reqs = append(d.reqs, devRequest{Seq: len(d.reqs) + 1, At: time.Now(), Client: client})
	d.mu.Unlock()
}

// HandleCoils logs the request and serves plcsim's coils.
func (d *device) HandleCoils(req *mbserver.CoilsRequest) ([]bool, error) {
	d.record(req.ClientAddr)
	return d.PLC.HandleCoils(req)
}

// HandleDiscreteInputs logs the request and serves plcsim's inputs.
func (d *device) HandleDiscreteInputs(req *mbserver.DiscreteInputsRequest) ([]bool, error) {
	d.record(req.ClientAddr)
	return d.PLC.HandleDiscreteInputs(req)
}

// HandleHoldingRegisters logs the request and serves plcsim's registers.
func (d *device) HandleHoldingRegisters(req *mbserver.HoldingRegistersRequest) ([]uint16, error) {
	d.record(req.ClientAddr)
	return d.PLC.HandleHoldingRegisters(req)
}

// HandleInputRegisters logs the request and serves plcsim's registers.
func (d *device) HandleInputRegisters(req *mbserver.InputRegistersRequest) ([]uint16, error) {
	d.record(req.ClientAddr)
	return d.PLC.HandleInputRegisters(req)
}

// connRequests is one device connection's requests, as the device logged
// them.
type connRequests struct {
	Conn        int // the proxy's connection id; 0 if none matched
	First, Last devRequest
	N           int
	// After counts requests after the instant passed to requests.
	After int
}

// requestLog returns the device's log with each request attributed to the
// proxy connection it came through: the latest connection opened before
// the request whose upstream address is the request's client address
// (a port can be reused after its connection closed).
func (d *device) requestLog() []attributed {
	d.mu.Lock()
	reqs := append([]devRequest(nil), d.reqs...)
	d.mu.Unlock()
	return attribute(reqs, d.proxy.Stats().Conns)
}

func attribute(reqs []devRequest, conns []faultproxy.ConnStats) []attributed {
	byAddr := map[string][]faultproxy.ConnStats{}
	for _, c := range conns {
		if c.UpstreamAddr != "" {
			byAddr[c.UpstreamAddr] = append(byAddr[c.UpstreamAddr], c)
		}
	}
	out := make([]attributed, len(reqs))
	for i, r := range reqs {
		out[i] = attributed{devRequest: r}
		for _, c := range byAddr[r.Client] {
			if c.Opened.Before(r.At) && c.ID > out[i].Conn {
				out[i].Conn = c.ID
			}
		}
	}
	return out
}

type attributed struct {
	devRequest
	Conn int
}

// lastBefore is the connection of the last request the device handled
// before t (0: none).
func (d *device) lastBefore(t time.Time) int {
	log := d.requestLog()
	for i := len(log) - 1; i >= 0; i-- {
		if log[i].At.Before(t) {
			return log[i].Conn
		}
	}
	return 0
}

// conns summarises every connection's requests in the order of their
// first request; After counts those after instant after. Requests no
// proxy connection accounts for are under connection 0.
func (d *device) conns(after time.Time) []connRequests { return summarise(d.requestLog(), after) }

func summarise(log []attributed, after time.Time) []connRequests {
	idx := map[int]int{}
	var out []connRequests
	for _, r := range log {
		i, ok := idx[r.Conn]
		if !ok {
			i = len(out)
			idx[r.Conn] = i
			out = append(out, connRequests{Conn: r.Conn, First: r.devRequest})
		}
		c := &out[i]
		c.Last, c.N = r.devRequest, c.N+1
		if r.At.After(after) {
			c.After++
		}
	}
	return out
}

// find returns conn id's summary.
func find(cs []connRequests, id int) (connRequests, bool) {
	for _, c := range cs {
		if c.Conn == id {
			return c, true
		}
	}
	return connRequests{}, false
}

// handover checks the witness for one takeover: the old owner's
// connection's last request strictly precedes the first request of every
// connection that started serving after it did. It returns the
// successor's connection (the first to serve after old) and the device's
// idle gap between them. Connections that started before old are the
// previous takeover's business (and the whole run's overlap check's).
func handover(cs []connRequests, old int) (next connRequests, gap time.Duration, err error) {
	o, ok := find(cs, old)
	if !ok {
		return connRequests{}, 0, fmt.Errorf("the device logged no request from the old owner's connection %d", old)
	}
	var found bool
	for _, c := range cs {
		if c.First.Seq <= o.First.Seq {
			continue
		}
		if c.First.Seq < o.Last.Seq {
			return c, 0, fmt.Errorf("two clients at the device: connection %d sent its first request at %s (#%d), but the old owner's connection %d sent %d more up to %s (#%d), %s later",
				c.Conn, clock(c.First.At), c.First.Seq, old, o.Last.Seq-c.First.Seq, clock(o.Last.At), o.Last.Seq, fs(o.Last.At.Sub(c.First.At)))
		}
		if !found || c.First.Seq < next.First.Seq {
			next, found = c, true
		}
	}
	if !found {
		return connRequests{}, 0, fmt.Errorf("the device logged no request from a connection after the old owner's %d", old)
	}
	return next, next.First.At.Sub(o.Last.At), nil
}

// overlaps lists every pair of connections whose request spans
// interleave in the device's log over the whole run.
func overlaps(cs []connRequests) []string {
	sorted := append([]connRequests(nil), cs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].First.Seq < sorted[j].First.Seq })
	var out []string
	for i := 1; i < len(sorted); i++ {
		for j := 0; j < i; j++ {
			if a, b := sorted[j], sorted[i]; b.First.Seq < a.Last.Seq {
				out = append(out, fmt.Sprintf("the device served connections %d and %d at once: %d's first request %s (#%d) precedes %d's last %s (#%d)",
					a.Conn, b.Conn, b.Conn, clock(b.First.At), b.First.Seq, a.Conn, clock(a.Last.At), a.Last.Seq))
			}
		}
	}
	return out
}

func (d *device) summary() string {
	var b strings.Builder
	for _, c := range d.conns(time.Time{}) {
		fmt.Fprintf(&b, "conn %d: %d requests #%d %s .. #%d %s\n", c.Conn, c.N, c.First.Seq, clock(c.First.At), c.Last.Seq, clock(c.Last.At))
	}
	return b.String()
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
