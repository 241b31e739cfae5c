// Package modbus is the Modbus TCP and RTU device transport, built on
// github.com/goburrow/modbus for framing and on its own connection handling
// for the library's traps: every I/O error or timeout closes the connection
// (a late reply would otherwise pair with the next request), every request
// is serialized (an RTU line carries one frame at a time) and exception
// replies are decoded here into ExceptionError.
//
// Tags live in holding or input registers, coils or discrete inputs; a
// poll group's adjacent tags are read with one request when merge_requests
// is on. The configuration is a *routes.Device of kind modbus_tcp or
// modbus_rtu whose Settings and tags' Settings hold this package's Config
// (RTUConfig) and TagConfig (config.go).
package modbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/goburrow/modbus"
	"github.com/goburrow/serial"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// Sentinel errors every device transport has (transports.DeviceErrors),
// each reading "modbus: ...".
var (
	errs = transports.NewDeviceErrors("modbus")

	ErrConfig, ErrClosed, ErrNotOpen, ErrConnect, ErrTimeout     = errs.Config, errs.Closed, errs.NotOpen, errs.Connect, errs.Timeout
	ErrIO, ErrUnknownGroup, ErrUnknownTag, ErrReadOnly, ErrValue = errs.IO, errs.UnknownGroup, errs.UnknownTag, errs.ReadOnly, errs.Value
)

// Sentinel errors of this package alone. Every error the package returns
// wraps one of these or of the shared ones above (or a context error) and
// names the device, tag or address at fault.
var (
	// ErrAddress reports a tag address that does not parse.
	ErrAddress = errors.New("modbus: invalid address")
	// ErrType reports a value type the package does not know.
	ErrType = errors.New("modbus: unknown type")
	// ErrFrame reports a malformed reply; the connection is closed.
	ErrFrame = errors.New("modbus: malformed reply")
	// ErrException matches every ExceptionError with errors.Is.
	ErrException = errors.New("modbus: exception")
)

// ExceptionError is a Modbus exception reply. The device answered, so the
// connection stays open.
type ExceptionError struct {
	Function byte
	Code     byte
}

var exceptionNames = map[byte]string{
	1: "illegal function", 2: "illegal data address", 3: "illegal data value",
	4: "server device failure", 5: "acknowledge", 6: "server device busy",
	8: "memory parity error", 10: "gateway path unavailable",
	11: "gateway target device failed to respond",
}

func (e *ExceptionError) Error() string {
	name, ok := exceptionNames[e.Code]
	if !ok {
		name = "unknown exception"
	}
	return fmt.Sprintf("modbus: exception %d (%s) to function %d", e.Code, name, e.Function&0x7f)
}

// Is makes errors.Is(err, ErrException) true for every exception.
func (e *ExceptionError) Is(target error) bool { return target == ErrException }

// group is a parsed poll group and its read plan.
type group struct {
	name string
	tags []*tag
	reqs []request
}

// Transport is one Modbus device connection. Its methods are safe for
// concurrent use; device I/O is serialized: RTU allows one frame on the
// line at a time and a TCP reply is only trusted for the one request in
// flight. The embedded Conn holds the connection's owner-bound lifecycle.
type Transport struct {
	*transports.Conn[*mconn]
	name    string
	kind    string
	address string
	unit    byte
	serial  Serial
	merge   bool

	*transports.Catalog[*group, *tag]
	first *request // the read that proves activation; nil without tags

	// dial opens a connection; tests replace it to reach an in-memory
	// serial line.
	dial func(ctx context.Context) (link, error)
}

// mconn is one open connection and the goburrow client framing on it;
// unit is the framing's unit id, set before each request.
type mconn struct {
	l    link
	c    modbus.Client
	unit *byte
}

// New builds a transport for a modbus_tcp or modbus_rtu device, checking
// every tag.
func New(name string, dev *routes.Device) (*Transport, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: transport %q: no device", ErrConfig, name)
	}
	s, err := settings(dev)
	if err != nil {
		return nil, fmt.Errorf("%w: device %q: %v", ErrConfig, name, err)
	}
	t := &Transport{
		name:    name,
		kind:    dev.Kind,
		address: dev.Address,
		serial:  s.Serial.withDefaults(),
		merge:   s.MergeRequests == nil || *s.MergeRequests,
	}
	switch dev.Kind {
	case KindTCP:
		if _, _, err := net.SplitHostPort(dev.Address); err != nil && dev.Address != "" && !strings.Contains(dev.Address, ":") {
			// A bare host name means the standard Modbus port.
			t.address = net.JoinHostPort(dev.Address, DefaultPort)
		} else if err != nil {
			return nil, fmt.Errorf("%w: device %q: address %q: want host:port: %v", ErrConfig, name, dev.Address, err)
		}
		t.dial = t.dialTCP
	case KindRTU:
		if dev.Address == "" {
			return nil, fmt.Errorf("%w: device %q: address: want a serial device path such as /dev/ttyUSB0", ErrConfig, name)
		}
		t.dial = t.dialRTU
	default:
		return nil, fmt.Errorf("%w: device %q: kind %q: want %s or %s", ErrConfig, name, dev.Kind, KindTCP, KindRTU)
	}
	var order ByteOrder
	if t.unit, order, err = s.Config.unitAndOrder(); err != nil {
		return nil, fmt.Errorf("%w: device %q: %v", ErrConfig, name, err)
	}
	units, err := groupUnits(dev, t.unit)
	if err != nil {
		return nil, fmt.Errorf("%w: device %q: %v", ErrConfig, name, err)
	}
	t.Catalog, err = transports.NewCatalog(name, dev, []string{"poll"}, errs,
		func(tg *routes.Tag) (*tag, error) { return parseTag(tg, order) },
		func(pg *routes.PollGroup, tags []*tag) *group {
			for _, tg := range tags {
				tg.unit = units[pg]
			}
			g := &group{name: pg.Name, tags: tags, reqs: plan(tags, t.merge)}
			if t.first == nil && len(g.reqs) > 0 {
				t.first = &g.reqs[0]
			}
			return g
		})
	if err != nil {
		return nil, err
	}
	connect, request, closing := dev.Timeouts()
	t.Conn = transports.NewConn(transports.ConnConfig[*mconn]{
		Name: name, Where: t.address,
		ConnectTimeout: connect, RequestTimeout: request, CloseTimeout: closing, Errors: errs,
		Dial:   t.connect,
		Hangup: func(c *mconn) { _ = c.l.close() },
	})
	return t, nil
}

// Open connects and reads the first request of the first poll group,
// within ActivationBound. ctx is the owner context: the connection, and
// every reconnection after it, lives only while ctx does, and ends at once
// when ctx is cancelled.
func (t *Transport) Open(ctx context.Context) error {
	return t.Conn.Open(ctx, func(actx context.Context) error {
		if _, _, err := t.Current(actx); err != nil {
			return err
		}
		if t.first == nil {
			return nil
		}
		if _, err := t.read(actx, t.first.unit, t.first.table, t.first.start, t.first.count); err != nil && !errors.Is(err, ErrException) {
			return fmt.Errorf("device %q: first read of %s %d+%d: %w", t.name, t.first.table, t.first.start, t.first.count, err)
		}
		return nil
	})
}

// connect dials a link and puts a goburrow client on it.
func (t *Transport) connect(ctx context.Context) (*mconn, error) {
	l, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	var pk modbus.Packager
	var unit *byte
	if t.kind == KindRTU {
		h := modbus.NewRTUClientHandler(t.address)
		pk, unit = h, &h.SlaveId
	} else {
		h := modbus.NewTCPClientHandler(t.address)
		pk, unit = h, &h.SlaveId
	}
	*unit = t.unit
	return &mconn{l: l, c: modbus.NewClient2(pk, l), unit: unit}, nil
}

func (t *Transport) dialTCP(ctx context.Context) (link, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", t.address)
	if err != nil {
		return nil, err
	}
	return &tcpLink{conn: conn}, nil
}

func (t *Transport) dialRTU(ctx context.Context) (link, error) {
	cfg := &serial.Config{
		Address:  t.address,
		BaudRate: t.serial.BaudRate,
		DataBits: t.serial.DataBits,
		StopBits: t.serial.StopBits,
		Parity:   t.serial.Parity,
		Timeout:  rtuReadSlice,
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	port, err := serial.Open(cfg)
	if err != nil {
		return nil, err
	}
	return &rtuLink{port: port, frameDelay: rtuFrameDelay(cfg.BaudRate)}, nil
}

// op names a request in errors; it is formatted only when one is made.
type op struct {
	verb  string // "read" or "write"
	unit  byte
	table table
	start uint16
	count int // registers or bits; 0 for a single-register or coil write
}

// String reads e.g. "read holding 0+8 of unit 1" or "write coil 3 of
// unit 2".
func (o op) String() string {
	if o.count == 0 {
		return fmt.Sprintf("%s %s %d of unit %d", o.verb, o.table, o.start, o.unit)
	}
	return fmt.Sprintf("%s %s %d+%d of unit %d", o.verb, o.table, o.start, o.count, o.unit)
}

// exchange runs one request on the connection, bounded by request_timeout
// and ctx. Any failure but an exception reply closes the connection so the
// next request starts on a fresh one. The caller holds the Conn's Lock.
func (t *Transport) exchange(ctx context.Context, what op, fn func(modbus.Client) ([]byte, error)) ([]byte, error) {
	mc, _, err := t.Current(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(t.RequestTimeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	mc.l.setDeadline(deadline)
	// Ending ctx interrupts the request: Begin closes the link.
	end, err := t.BeginOp(ctx, mc, what)
	if err != nil {
		return nil, err
	}
	*mc.unit = what.unit
	res, err := fn(mc.c)
	end()
	if err == nil {
		t.SetState(true, nil)
		return res, nil
	}
	var mbe *modbus.ModbusError
	if errors.As(err, &mbe) {
		t.SetState(true, nil)
		return nil, fmt.Errorf("%s: %w", what, &ExceptionError{Function: mbe.FunctionCode, Code: mbe.ExceptionCode})
	}
	timedOut := !time.Now().Before(deadline) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, serial.ErrTimeout)
	return nil, t.Failed(ctx, mc, what.String(), err, timedOut)
}

// read reads count registers or bits of a table of a unit; bits come
// back one byte per bit (0 or 1), registers as wire bytes.
func (t *Transport) read(ctx context.Context, unit byte, tb table, start uint16, count int) ([]byte, error) {
	what := op{verb: "read", unit: unit, table: tb, start: start, count: count}
	n := uint16(count)
	res, err := t.exchange(ctx, what, func(c modbus.Client) ([]byte, error) {
		switch tb {
		case holding:
			return c.ReadHoldingRegisters(start, n)
		case input:
			return c.ReadInputRegisters(start, n)
		case coil:
			return c.ReadCoils(start, n)
		default:
			return c.ReadDiscreteInputs(start, n)
		}
	})
	if err != nil {
		return nil, err
	}
	if tb.isBits() {
		if len(res)*8 < count {
			return nil, fmt.Errorf("%w: %s: %d bytes for %d bits", ErrFrame, what, len(res), count)
		}
		bits := make([]byte, count)
		for i := range bits {
			bits[i] = (res[i/8] >> (uint(i) % 8)) & 1
		}
		return bits, nil
	}
	if len(res) != 2*count {
		t.DropCurrent()
		return nil, fmt.Errorf("%w: %s: %d bytes for %d registers", ErrFrame, what, len(res), count)
	}
	return res, nil
}

// Poll reads every tag of a group. A tag whose read the device refuses
// (an exception) carries Bad quality with the error; when a joined read
// fails that way its tags are read one by one, so one bad address spoils
// only its own tag. Poll fails, with every value Bad, only when the device
// cannot be reached.
func (t *Transport) Poll(ctx context.Context, name string) ([]transports.Value, error) {
	g, vals, err := t.Group(name)
	if err != nil {
		return nil, err
	}
	t.Lock()
	defer t.Unlock()
	for _, r := range g.reqs {
		raw, err := t.read(ctx, r.unit, r.table, r.start, r.count)
		now := time.Now()
		switch {
		case err == nil:
			for _, i := range r.tags {
				vals[i] = decodeValue(g.tags[i], raw, r.start, now)
			}
		case errors.Is(err, ErrException) && len(r.tags) > 1:
			for _, i := range r.tags {
				tg := g.tags[i]
				raw, err := t.read(ctx, tg.unit, tg.table, tg.start, tg.count)
				now := time.Now()
				if err == nil {
					vals[i] = decodeValue(tg, raw, tg.start, now)
					continue
				}
				if !errors.Is(err, ErrException) {
					return transports.FailUnread(vals, err)
				}
				vals[i] = badValue(tg, err, now)
			}
		case errors.Is(err, ErrException):
			vals[r.tags[0]] = badValue(g.tags[r.tags[0]], err, now)
		default:
			return transports.FailUnread(vals, err)
		}
	}
	return vals, nil
}

func badValue(tg *tag, err error, now time.Time) transports.Value {
	return transports.Value{Tag: tg.name, Quality: transports.Bad, Err: fmt.Errorf("tag %q at %s %s: %w", tg.name, tg.table, tg.address, err), Timestamp: now}
}

// decodeValue extracts one tag from a read starting at start.
func decodeValue(tg *tag, raw []byte, start uint16, now time.Time) transports.Value {
	off := int(tg.start - start)
	var v any
	var err error
	if tg.table.isBits() {
		v = raw[off] == 1
	} else {
		v, err = decodeRegisters(tg, raw[2*off:2*(off+tg.count)])
	}
	if err != nil {
		return badValue(tg, err, now)
	}
	return transports.Value{Tag: tg.name, Value: tagvalue.Scale(v, tg.scale, tg.offset), Quality: transports.Good, Timestamp: now}
}

// Write writes one writable tag: a coil, a bit of a holding register (read,
// modified and written back while no other request can interleave), or a
// value in one or more holding registers. value may be a bool, any Go
// number, a json.Number or a decimal string; scale and offset are
// inverted first.
func (t *Transport) Write(ctx context.Context, name string, value any) error {
	tg, err := t.Writable(name)
	if err != nil {
		return err
	}
	t.Lock()
	defer t.Unlock()
	wrap := func(err error) error {
		return fmt.Errorf("write tag %q at %s %s on device %q: %w", tg.name, tg.table, tg.address, t.name, err)
	}
	switch {
	case tg.table == coil:
		b, err := tagvalue.Bool(value)
		if err != nil {
			return wrap(fmt.Errorf("%w: %w", ErrValue, err))
		}
		var v uint16
		if b {
			v = 0xFF00
		}
		_, err = t.exchange(ctx, op{verb: "write", unit: tg.unit, table: coil, start: tg.start}, func(c modbus.Client) ([]byte, error) {
			return c.WriteSingleCoil(tg.start, v)
		})
		if err != nil {
			return wrap(err)
		}
		return nil
	case tg.typ == tagvalue.TypeBool:
		b, err := tagvalue.Bool(value)
		if err != nil {
			return wrap(fmt.Errorf("%w: %w", ErrValue, err))
		}
		raw, err := t.read(ctx, tg.unit, holding, tg.start, 1)
		if err != nil {
			return wrap(err)
		}
		v := uint16(raw[0])<<8 | uint16(raw[1])
		if b {
			v |= 1 << uint(tg.bit)
		} else {
			v &^= 1 << uint(tg.bit)
		}
		_, err = t.exchange(ctx, op{verb: "write", unit: tg.unit, table: holding, start: tg.start}, func(c modbus.Client) ([]byte, error) {
			return c.WriteSingleRegister(tg.start, v)
		})
		if err != nil {
			return wrap(err)
		}
		return nil
	}
	wire, err := encodeRegisters(tg, value)
	if err != nil {
		return wrap(err)
	}
	_, err = t.exchange(ctx, op{verb: "write", unit: tg.unit, table: holding, start: tg.start, count: tg.count}, func(c modbus.Client) ([]byte, error) {
		if len(wire) == 2 {
			return c.WriteSingleRegister(tg.start, uint16(wire[0])<<8|uint16(wire[1]))
		}
		return c.WriteMultipleRegisters(tg.start, uint16(len(wire)/2), wire)
	})
	if err != nil {
		return wrap(err)
	}
	return nil
}

// Interface checks.
var (
	_ transports.Poller = (*Transport)(nil)
	_ transports.Writer = (*Transport)(nil)
)
