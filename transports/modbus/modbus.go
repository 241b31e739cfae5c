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
// modbus_rtu.
package modbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goburrow/modbus"
	"github.com/goburrow/serial"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// Sentinel errors; every error the package returns wraps one of them (or a
// context error) and names the device, tag or address at fault.
var (
	// ErrConfig reports an invalid device or tag configuration.
	ErrConfig = errors.New("modbus: invalid configuration")
	// ErrAddress reports a tag address that does not parse.
	ErrAddress = errors.New("modbus: invalid address")
	// ErrType reports a value type the package does not know.
	ErrType = errors.New("modbus: unknown type")
	// ErrValue reports a written value that does not fit its tag.
	ErrValue = transports.Sentinel("modbus: invalid value", transports.ErrBadValue)
	// ErrFrame reports a malformed reply; the connection is closed.
	ErrFrame = errors.New("modbus: malformed reply")
	// ErrTimeout reports a device that did not answer within the request
	// timeout; the connection is closed.
	ErrTimeout = errors.New("modbus: request timed out")
	// ErrConnect reports a failed connection attempt.
	ErrConnect = errors.New("modbus: connect failed")
	// ErrIO reports a connection that broke during a request.
	ErrIO = errors.New("modbus: connection failed")
	// ErrException matches every ExceptionError with errors.Is.
	ErrException = errors.New("modbus: exception")
	// ErrClosed reports use of a transport that is closed or whose owner
	// context has ended.
	ErrClosed = errors.New("modbus: transport closed")
	// ErrNotOpen reports a poll or write before Open.
	ErrNotOpen = errors.New("modbus: transport not open")
	// ErrUnknownTag reports a write to a tag the device does not define.
	ErrUnknownTag = transports.Sentinel("modbus: unknown tag", transports.ErrUnknownTag)
	// ErrUnknownGroup reports a poll of a group the device does not define.
	ErrUnknownGroup = errors.New("modbus: unknown poll group")
	// ErrReadOnly reports a write to a tag not marked writable.
	ErrReadOnly = transports.Sentinel("modbus: tag not writable", transports.ErrReadOnly)
)

func init() {
	transports.Register(routes.KindModbusTCP, factory)
	transports.Register(routes.KindModbusRTU, factory)
}

func factory(name string, cfg any) (transports.Transport, error) {
	dev, ok := cfg.(*routes.Device)
	if !ok {
		return nil, fmt.Errorf("%w: transport %q: configuration is %T, want *routes.Device", ErrConfig, name, cfg)
	}
	return New(name, dev)
}

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
// concurrent use; device I/O is serialized.
type Transport struct {
	name    string
	kind    string
	address string
	unit    byte
	serial  routes.Serial
	merge   bool

	connectTimeout, requestTimeout, closeTimeout time.Duration

	groups map[string]*group
	tags   map[string]*tag
	first  *request // the read that proves activation; nil without tags

	// io serializes requests: RTU allows one frame on the line at a time and
	// a TCP reply is only trusted for the one request in flight.
	io sync.Mutex

	// mu guards the fields below; it is never held during I/O, so the owner
	// context can close the connection while a request is in flight.
	mu        sync.Mutex
	link      link
	client    modbus.Client
	owner     context.Context
	stopOwner func() bool
	closed    bool
	// life ends when the transport closes; it cancels a dial in progress
	// so Close leaves no connection being made behind it.
	life    context.Context
	endLife context.CancelFunc
	state   transports.State
	watch   *watch // the context of the latest request, see watchFor

	// dial opens a connection; tests replace it to reach an in-memory
	// serial line.
	dial func(ctx context.Context) (link, error)
}

// New builds a transport for a modbus_tcp or modbus_rtu device, checking
// every tag.
func New(name string, dev *routes.Device) (*Transport, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: transport %q: no device", ErrConfig, name)
	}
	t := &Transport{
		name:    name,
		kind:    dev.Kind,
		address: dev.Address,
		serial:  dev.Serial,
		merge:   dev.MergeRequests == nil || *dev.MergeRequests,
		groups:  map[string]*group{},
		tags:    map[string]*tag{},
		state:   transports.State{Since: time.Now(), Err: ErrNotOpen},
	}
	t.connectTimeout, t.requestTimeout, t.closeTimeout = dev.Timeouts()
	t.life, t.endLife = context.WithCancel(context.Background())
	switch dev.Kind {
	case routes.KindModbusTCP:
		if _, _, err := net.SplitHostPort(dev.Address); err != nil && dev.Address != "" && !strings.Contains(dev.Address, ":") {
			// A bare host name means the standard Modbus port.
			t.address = net.JoinHostPort(dev.Address, routes.DefaultModbusPort)
		} else if err != nil {
			return nil, fmt.Errorf("%w: device %q: address %q: want host:port: %v", ErrConfig, name, dev.Address, err)
		}
		t.dial = t.dialTCP
	case routes.KindModbusRTU:
		if dev.Address == "" {
			return nil, fmt.Errorf("%w: device %q: address: want a serial device path such as /dev/ttyUSB0", ErrConfig, name)
		}
		t.dial = t.dialRTU
	default:
		return nil, fmt.Errorf("%w: device %q: kind %q: want %s or %s", ErrConfig, name, dev.Kind, routes.KindModbusTCP, routes.KindModbusRTU)
	}
	unit := routes.DefaultUnitID
	if dev.UnitID != nil {
		unit = *dev.UnitID
	}
	if unit < 0 || unit > 255 {
		return nil, fmt.Errorf("%w: device %q: unit_id %d: want 0..255", ErrConfig, name, unit)
	}
	t.unit = byte(unit)
	order := ABCD
	if dev.ByteOrder != "" {
		o, ok := parseOrder(dev.ByteOrder)
		if !ok {
			return nil, fmt.Errorf("%w: device %q: byte_order %q: want ABCD, DCBA, BADC or CDAB", ErrConfig, name, dev.ByteOrder)
		}
		order = o
	}
	for _, pg := range dev.Groups {
		if pg == nil {
			continue
		}
		if _, dup := t.groups[pg.Name]; dup {
			return nil, fmt.Errorf("%w: device %q: poll group %q defined twice", ErrConfig, name, pg.Name)
		}
		if pg.Mode != "" && pg.Mode != "poll" {
			return nil, fmt.Errorf("%w: device %q: group %q: mode %q: Modbus only polls", ErrConfig, name, pg.Name, pg.Mode)
		}
		g := &group{name: pg.Name}
		for _, tg := range pg.Tags {
			if tg == nil {
				continue
			}
			pt, err := parseTag(tg, order)
			if err != nil {
				return nil, fmt.Errorf("device %q: group %q: %w", name, pg.Name, err)
			}
			if _, dup := t.tags[pt.name]; dup {
				return nil, fmt.Errorf("%w: device %q: tag %q defined twice", ErrConfig, name, pt.name)
			}
			t.tags[pt.name] = pt
			g.tags = append(g.tags, pt)
		}
		g.reqs = plan(g.tags, t.merge)
		if t.first == nil && len(g.reqs) > 0 {
			t.first = &g.reqs[0]
		}
		t.groups[g.name] = g
	}
	return t, nil
}

// Name identifies the transport.
func (t *Transport) Name() string { return t.name }

// ActivationBound is connect_timeout plus request_timeout: one connect and
// the first read.
func (t *Transport) ActivationBound() time.Duration { return t.connectTimeout + t.requestTimeout }

// CloseBound is close_timeout. Closing a socket or a port does not wait for
// the device, so Close returns well within it.
func (t *Transport) CloseBound() time.Duration { return t.closeTimeout }

// State reports whether the connection is up and its last request
// succeeded (an exception reply counts: the device answered).
func (t *Transport) State() transports.State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

func (t *Transport) setState(ok bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		// Closing set the final state; a request it interrupted must not
		// overwrite the reason.
		return
	}
	t.setStateLocked(ok, err)
}

func (t *Transport) setStateLocked(ok bool, err error) {
	t.state = t.state.Next(ok, err)
}

// Open connects and reads the first request of the first poll group,
// within ActivationBound. ctx is the owner context: the connection, and
// every reconnection after it, lives only while ctx does, and ends at once
// when ctx is cancelled.
func (t *Transport) Open(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return fmt.Errorf("%w: device %q", ErrClosed, t.name)
	}
	if t.owner != nil {
		t.mu.Unlock()
		return fmt.Errorf("%w: device %q: opened twice", ErrConfig, t.name)
	}
	t.owner = ctx
	t.stopOwner = context.AfterFunc(ctx, func() {
		t.shut(fmt.Errorf("%w: device %q: owner context ended: %w", ErrClosed, t.name, context.Cause(ctx)))
	})
	t.mu.Unlock()

	actx, cancel := context.WithTimeout(ctx, t.ActivationBound())
	defer cancel()
	t.io.Lock()
	defer t.io.Unlock()
	if _, _, _, err := t.connected(actx); err != nil {
		return err
	}
	if t.first == nil {
		return nil
	}
	if _, err := t.read(actx, t.first.table, t.first.start, t.first.count); err != nil && !errors.Is(err, ErrException) {
		return fmt.Errorf("device %q: first read of %s %d+%d: %w", t.name, t.first.table, t.first.start, t.first.count, err)
	}
	return nil
}

// shut closes the transport for good.
func (t *Transport) shut(reason error) {
	t.mu.Lock()
	t.closed = true
	t.endLife()
	l, w := t.link, t.watch
	t.link, t.client, t.watch = nil, nil, nil
	t.setStateLocked(false, reason)
	t.mu.Unlock()
	if l != nil {
		_ = l.close()
	}
	w.stopWatching()
}

// watch closes the link of the request in flight when the context the
// requests run under ends. It stays registered on that context from one
// request to the next (a poller polls under one context for as long as it
// runs): an AfterFunc registered per request cost more than the rest of
// the request's bookkeeping together.
type watch struct {
	done <-chan struct{} // the context's Done, which identifies it
	ctx  context.Context
	stop func() bool

	mu   sync.Mutex
	busy link // the link of the request in flight, nil between requests
}

// watchFor returns the watch of ctx, replacing that of an earlier
// context; nil when ctx never ends. The caller holds t.io.
func (t *Transport) watchFor(ctx context.Context) *watch {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	t.mu.Lock()
	old := t.watch
	if old != nil && old.done == done {
		t.mu.Unlock()
		return old
	}
	t.mu.Unlock()
	w := &watch{done: done, ctx: ctx}
	w.stop = context.AfterFunc(ctx, w.interrupt)
	t.mu.Lock()
	if t.closed {
		// Close ran meanwhile: keep nothing registered behind it.
		t.mu.Unlock()
		w.stopWatching()
		return w
	}
	t.watch = w
	t.mu.Unlock()
	old.stopWatching()
	return w
}

// begin marks a request on l in flight; false means the context has
// ended and the request must not be sent.
func (w *watch) begin(l link) bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	w.busy = l
	w.mu.Unlock()
	// Err is set before the AfterFunc runs: either the context ended
	// before busy was set and this sees it, or interrupt sees busy.
	if w.ctx.Err() != nil {
		w.end()
		return false
	}
	return true
}

// end marks the request finished.
func (w *watch) end() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.busy = nil
	w.mu.Unlock()
}

// interrupt runs when the context ends.
func (w *watch) interrupt() {
	w.mu.Lock()
	l := w.busy
	w.mu.Unlock()
	if l != nil {
		_ = l.close()
	}
}

func (w *watch) stopWatching() {
	if w != nil {
		w.stop()
	}
}

// Close closes the connection; it interrupts a request in flight rather
// than waiting for it, so it returns within CloseBound.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	stop := t.stopOwner
	t.mu.Unlock()
	if stop != nil {
		stop()
	}
	t.shut(fmt.Errorf("%w: device %q", ErrClosed, t.name))
	return nil
}

// connected returns the live connection and the owner context, dialling
// a connection under ctx and the owner context if there is none. The
// caller holds t.io.
func (t *Transport) connected(ctx context.Context) (link, modbus.Client, context.Context, error) {
	t.mu.Lock()
	owner, closed, l, c := t.owner, t.closed, t.link, t.client
	t.mu.Unlock()
	switch {
	case closed:
		return nil, nil, nil, fmt.Errorf("%w: device %q", ErrClosed, t.name)
	case owner == nil:
		return nil, nil, nil, fmt.Errorf("%w: device %q", ErrNotOpen, t.name)
	case l != nil:
		return l, c, owner, nil
	}
	if err := transports.GuardRequest(ctx, owner); err != nil {
		return nil, nil, nil, fmt.Errorf("device %q: connect: %w", t.name, err)
	}
	dctx, cancel := context.WithTimeout(ctx, t.connectTimeout)
	defer cancel()
	stopLife := context.AfterFunc(t.life, cancel)
	defer stopLife()
	stop := context.AfterFunc(owner, cancel)
	defer stop()
	l, err := t.dial(dctx)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		err = fmt.Errorf("%w: device %q at %s: %w", ErrConnect, t.name, t.address, err)
		t.setState(false, err)
		return nil, nil, nil, err
	}
	var pk modbus.Packager
	if t.kind == routes.KindModbusRTU {
		h := modbus.NewRTUClientHandler(t.address)
		h.SlaveId = t.unit
		pk = h
	} else {
		h := modbus.NewTCPClientHandler(t.address)
		h.SlaveId = t.unit
		pk = h
	}
	c = modbus.NewClient2(pk, l)
	t.mu.Lock()
	if t.closed {
		// The owner context ended while dialling.
		t.mu.Unlock()
		_ = l.close()
		return nil, nil, nil, fmt.Errorf("%w: device %q", ErrClosed, t.name)
	}
	t.link, t.client = l, c
	t.mu.Unlock()
	return l, c, owner, nil
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
	if cfg.BaudRate == 0 {
		cfg.BaudRate = 19200
	}
	if cfg.DataBits == 0 {
		cfg.DataBits = 8
	}
	if cfg.Parity == "" {
		cfg.Parity = "E"
	}
	if cfg.StopBits == 0 {
		cfg.StopBits = 1
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
	table table
	start uint16
	count int // registers or bits; 0 for a single-register or coil write
}

// String reads e.g. "read holding 0+8" or "write coil 3".
func (o op) String() string {
	if o.count == 0 {
		return fmt.Sprintf("%s %s %d", o.verb, o.table, o.start)
	}
	return fmt.Sprintf("%s %s %d+%d", o.verb, o.table, o.start, o.count)
}

// exchange runs one request on the connection, bounded by request_timeout
// and ctx. Any failure but an exception reply closes the connection so the
// next request starts on a fresh one. The caller holds t.io.
func (t *Transport) exchange(ctx context.Context, what op, fn func(modbus.Client) ([]byte, error)) ([]byte, error) {
	l, c, owner, err := t.connected(ctx)
	if err != nil {
		return nil, err
	}
	if err := transports.GuardRequest(ctx, owner); err != nil {
		// Nothing went on the wire; the connection is as good as before.
		return nil, fmt.Errorf("device %q: %s: %w", t.name, what, err)
	}
	deadline := time.Now().Add(t.requestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.setDeadline(deadline)
	// Ending ctx interrupts the request: its watch closes l.
	w := t.watchFor(ctx)
	if !w.begin(l) {
		// ctx ended already: nothing goes on the wire.
		return nil, fmt.Errorf("device %q: %s: %w", t.name, what, context.Cause(ctx))
	}
	res, err := fn(c)
	w.end()
	if err == nil {
		t.setState(true, nil)
		return res, nil
	}
	var mbe *modbus.ModbusError
	if errors.As(err, &mbe) {
		t.setState(true, nil)
		return nil, fmt.Errorf("%s: %w", what, &ExceptionError{Function: mbe.FunctionCode, Code: mbe.ExceptionCode})
	}
	t.drop(l)
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	switch {
	case closed:
		err = fmt.Errorf("%w: device %q: %s interrupted: %w", ErrClosed, t.name, what, err)
	case ctx.Err() != nil:
		err = fmt.Errorf("device %q: %s: %w", t.name, what, context.Cause(ctx))
	case !time.Now().Before(deadline) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, serial.ErrTimeout):
		err = fmt.Errorf("%w: device %q at %s: %s: no reply within %v", ErrTimeout, t.name, t.address, what, t.requestTimeout)
	case errors.Is(err, ErrFrame):
		err = fmt.Errorf("device %q at %s: %s: %w", t.name, t.address, what, err)
	default:
		err = fmt.Errorf("%w: device %q at %s: %s: %w", ErrIO, t.name, t.address, what, err)
	}
	t.setState(false, err)
	return nil, err
}

// drop closes l if it is still the current connection.
func (t *Transport) drop(l link) {
	t.mu.Lock()
	if t.link == l {
		t.link, t.client = nil, nil
	}
	t.mu.Unlock()
	_ = l.close()
}

// read reads count registers or bits of a table; bits come back one byte
// per bit (0 or 1), registers as wire bytes.
func (t *Transport) read(ctx context.Context, tb table, start uint16, count int) ([]byte, error) {
	what := op{verb: "read", table: tb, start: start, count: count}
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
		t.dropCurrent()
		return nil, fmt.Errorf("%w: %s: %d bytes for %d registers", ErrFrame, what, len(res), count)
	}
	return res, nil
}

func (t *Transport) dropCurrent() {
	t.mu.Lock()
	l := t.link
	t.mu.Unlock()
	if l != nil {
		t.drop(l)
	}
}

// Poll reads every tag of a group. A tag whose read the device refuses
// (an exception) carries Bad quality with the error; when a joined read
// fails that way its tags are read one by one, so one bad address spoils
// only its own tag. Poll fails, with every value Bad, only when the device
// cannot be reached.
func (t *Transport) Poll(ctx context.Context, name string) ([]transports.Value, error) {
	g, ok := t.groups[name]
	if !ok {
		return nil, fmt.Errorf("%w %q on device %q", ErrUnknownGroup, name, t.name)
	}
	t.io.Lock()
	defer t.io.Unlock()
	vals := make([]transports.Value, len(g.tags))
	for i, tg := range g.tags {
		vals[i] = transports.Value{Tag: tg.name, Quality: transports.Bad}
	}
	for _, r := range g.reqs {
		raw, err := t.read(ctx, r.table, r.start, r.count)
		now := time.Now()
		switch {
		case err == nil:
			for _, i := range r.tags {
				vals[i] = decodeValue(g.tags[i], raw, r.start, now)
			}
		case errors.Is(err, ErrException) && len(r.tags) > 1:
			for _, i := range r.tags {
				tg := g.tags[i]
				raw, err := t.read(ctx, tg.table, tg.start, tg.count)
				now := time.Now()
				if err == nil {
					vals[i] = decodeValue(tg, raw, tg.start, now)
					continue
				}
				if !errors.Is(err, ErrException) {
					return failAll(vals, err, now), err
				}
				vals[i] = badValue(tg, err, now)
			}
		case errors.Is(err, ErrException):
			vals[r.tags[0]] = badValue(g.tags[r.tags[0]], err, now)
		default:
			return failAll(vals, err, now), err
		}
	}
	return vals, nil
}

func badValue(tg *tag, err error, now time.Time) transports.Value {
	return transports.Value{Tag: tg.name, Quality: transports.Bad, Err: fmt.Errorf("tag %q at %s %s: %w", tg.name, tg.table, tg.address, err), Timestamp: now}
}

// failAll marks every value not yet read Bad with err.
func failAll(vals []transports.Value, err error, now time.Time) []transports.Value {
	for i := range vals {
		if vals[i].Quality == transports.Bad && vals[i].Err == nil {
			vals[i].Err, vals[i].Timestamp = err, now
		}
	}
	return vals
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
	tg, ok := t.tags[name]
	if !ok {
		return fmt.Errorf("%w %q on device %q", ErrUnknownTag, name, t.name)
	}
	if !tg.writable {
		return fmt.Errorf("%w: tag %q on device %q (set writable: true)", ErrReadOnly, name, t.name)
	}
	t.io.Lock()
	defer t.io.Unlock()
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
		_, err = t.exchange(ctx, op{verb: "write", table: coil, start: tg.start}, func(c modbus.Client) ([]byte, error) {
			return c.WriteSingleCoil(tg.start, v)
		})
		if err != nil {
			return wrap(err)
		}
		return nil
	case tg.typ == typeBool:
		b, err := tagvalue.Bool(value)
		if err != nil {
			return wrap(fmt.Errorf("%w: %w", ErrValue, err))
		}
		raw, err := t.read(ctx, holding, tg.start, 1)
		if err != nil {
			return wrap(err)
		}
		v := uint16(raw[0])<<8 | uint16(raw[1])
		if b {
			v |= 1 << uint(tg.bit)
		} else {
			v &^= 1 << uint(tg.bit)
		}
		_, err = t.exchange(ctx, op{verb: "write", table: holding, start: tg.start}, func(c modbus.Client) ([]byte, error) {
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
	_, err = t.exchange(ctx, op{verb: "write", table: holding, start: tg.start, count: tg.count}, func(c modbus.Client) ([]byte, error) {
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
