// Package s7 is the Siemens S7 device transport, built on
// github.com/robinson/gos7 over ISO-on-TCP. Tags use TIA-style addresses
// (DB1.DBX0.0, DB1.DBW10, DB1.DBD4, DB1.DBB2, DB1.STRING10.20, M/I/Q
// areas); a poll group's touching tags become one data item, and items are
// packed into read jobs that fit the PDU length the CPU negotiated.
//
// Around the library's traps: the transport dials the socket itself (under
// the owner context) and hands it to gos7, so closing it interrupts any
// exchange at once; the idle timeout that silently drops gos7's connection
// is disabled; every error closes the connection and the next request
// starts a fresh one (never Connect on a used handler); writes are framed
// here so a refused write reports its item's return code and a bit is
// written as a bit, not by rewriting its byte.
//
// The configuration is a *routes.Device of kind s7 whose Settings are a
// *Config (config.go), which this package registers with routes.
package s7

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/robinson/gos7"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// Sentinel errors; every error the package returns wraps one of them (or a
// context error) and names the device, tag or address at fault.
var (
	// ErrConfig reports an invalid device or tag configuration.
	ErrConfig = errors.New("s7: invalid configuration")
	// ErrAddress reports a tag address that does not parse.
	ErrAddress = errors.New("s7: invalid address")
	// ErrValue reports a written value that does not fit its tag.
	ErrValue = transports.Sentinel("s7: invalid value", transports.ErrBadValue)
	// ErrConnect reports a failed connection: TCP, COTP or PDU negotiation.
	ErrConnect = errors.New("s7: connect failed")
	// ErrTimeout reports a PLC that did not answer within the request
	// timeout; the connection is closed.
	ErrTimeout = errors.New("s7: request timed out")
	// ErrIO reports a connection that broke or a malformed reply; the
	// connection is closed.
	ErrIO = errors.New("s7: connection failed")
	// ErrItem matches every ItemError with errors.Is.
	ErrItem = errors.New("s7: PLC refused the item")
	// ErrClosed reports use of a transport that is closed or whose owner
	// context has ended.
	ErrClosed = errors.New("s7: transport closed")
	// ErrNotOpen reports a poll or write before Open.
	ErrNotOpen = errors.New("s7: transport not open")
	// ErrUnknownTag reports a write to a tag the device does not define.
	ErrUnknownTag = transports.Sentinel("s7: unknown tag", transports.ErrUnknownTag)
	// ErrUnknownGroup reports a poll of a group the device does not define.
	ErrUnknownGroup = errors.New("s7: unknown poll group")
	// ErrReadOnly reports a write to a tag not marked writable.
	ErrReadOnly = transports.Sentinel("s7: tag not writable", transports.ErrReadOnly)
	// ErrLibrary reports a gos7 build whose internals this package does not
	// recognise; it cannot hand the library its socket.
	ErrLibrary = errors.New("s7: unsupported gos7 version")
)

func init() {
	transports.Register(Kind, func(name string, cfg any) (transports.Transport, error) {
		dev, ok := cfg.(*routes.Device)
		if !ok {
			return nil, fmt.Errorf("%w: transport %q: configuration is %T, want *routes.Device", ErrConfig, name, cfg)
		}
		return New(name, dev)
	})
}

// ItemError is a data item the PLC answered with an error return code. The
// PLC answered, so the connection stays open.
type ItemError struct {
	Code byte
	// Text is gos7's or the code's description.
	Text string
}

var returnCodes = map[byte]string{
	0x01: "hardware fault", 0x03: "access denied", 0x05: "address out of range",
	0x06: "data type not supported", 0x07: "data type inconsistent", 0x0A: "object does not exist",
}

func (e *ItemError) Error() string {
	if e.Text != "" {
		return "s7: PLC refused the item: " + e.Text
	}
	if s, ok := returnCodes[e.Code]; ok {
		return fmt.Sprintf("s7: PLC refused the item: %s (return code %#02x)", s, e.Code)
	}
	return fmt.Sprintf("s7: PLC refused the item: return code %#02x", e.Code)
}

// Is makes errors.Is(err, ErrItem) true for every ItemError.
func (e *ItemError) Is(target error) bool { return target == ErrItem }

type group struct {
	name  string
	tags  []*tag
	spans []span
}

// conn is one established connection: our socket inside a gos7 handler.
type conn struct {
	h   *gos7.TCPClientHandler
	c   gos7.Client
	nc  net.Conn
	pdu int
}

func (c *conn) close() {
	_ = c.nc.Close()
	_ = c.h.Close()
}

// Transport is one S7 PLC connection. Its methods are safe for concurrent
// use; requests are serialized.
type Transport struct {
	name       string
	address    string
	rack, slot int

	connectTimeout, requestTimeout, closeTimeout time.Duration

	groups map[string]*group
	tags   map[string]*tag
	first  *group

	// io serializes requests: gos7 handles one exchange at a time.
	io sync.Mutex

	// mu guards the fields below and is never held during I/O, so the
	// owner context can close the socket while a request is in flight.
	mu        sync.Mutex
	cur       *conn
	owner     context.Context
	stopOwner func() bool
	closed    bool
	// life ends when the transport closes; it cancels a dial in progress
	// so Close leaves no connection being made behind it.
	life    context.Context
	endLife context.CancelFunc
	state   transports.State
}

// New builds a transport for an s7 device, checking every tag.
func New(name string, dev *routes.Device) (*Transport, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: transport %q: no device", ErrConfig, name)
	}
	if dev.Kind != Kind {
		return nil, fmt.Errorf("%w: device %q: kind %q, want %s", ErrConfig, name, dev.Kind, Kind)
	}
	cfg, err := settings(dev)
	if err == nil {
		err = checkRackSlot(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: device %q: %w", ErrConfig, name, err)
	}
	t := &Transport{
		name: name, rack: cfg.Rack, slot: cfg.Slot,
		groups: map[string]*group{},
		tags:   map[string]*tag{},
		state:  transports.State{Since: time.Now(), Err: ErrNotOpen},
	}
	t.connectTimeout, t.requestTimeout, t.closeTimeout = dev.Timeouts()
	t.life, t.endLife = context.WithCancel(context.Background())
	if t.address, err = dialAddress(dev.Address); err != nil {
		return nil, fmt.Errorf("%w: device %q: %w", ErrConfig, name, err)
	}
	for _, pg := range dev.Groups {
		if pg == nil {
			continue
		}
		if _, dup := t.groups[pg.Name]; dup {
			return nil, fmt.Errorf("%w: device %q: poll group %q defined twice", ErrConfig, name, pg.Name)
		}
		if pg.Mode != "" && pg.Mode != "poll" {
			return nil, fmt.Errorf("%w: device %q: group %q: mode %q: S7 only polls", ErrConfig, name, pg.Name, pg.Mode)
		}
		g := &group{name: pg.Name}
		for _, tg := range pg.Tags {
			if tg == nil {
				continue
			}
			pt, err := parseTag(tg)
			if err != nil {
				return nil, fmt.Errorf("device %q: group %q: %w", name, pg.Name, err)
			}
			if _, dup := t.tags[pt.name]; dup {
				return nil, fmt.Errorf("%w: device %q: tag %q defined twice", ErrConfig, name, pt.name)
			}
			t.tags[pt.name] = pt
			g.tags = append(g.tags, pt)
		}
		g.spans = spans(g.tags)
		if t.first == nil && len(g.spans) > 0 {
			t.first = g
		}
		t.groups[g.name] = g
	}
	return t, nil
}

// Name identifies the transport.
func (t *Transport) Name() string { return t.name }

// ActivationBound is connect_timeout plus request_timeout: the TCP, COTP
// and PDU negotiation exchange, then the first read job.
func (t *Transport) ActivationBound() time.Duration { return t.connectTimeout + t.requestTimeout }

// CloseBound is close_timeout. Close shuts the socket without waiting for
// the PLC, so it returns well within it.
func (t *Transport) CloseBound() time.Duration { return t.closeTimeout }

// State reports whether the connection is up and its last job succeeded
// (an item the PLC refused counts: the PLC answered).
func (t *Transport) State() transports.State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

func (t *Transport) setState(ok bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return // closing set the final state
	}
	t.setStateLocked(ok, err)
}

func (t *Transport) setStateLocked(ok bool, err error) {
	t.state = t.state.Next(ok, err)
}

// PDU is the PDU length negotiated on the current connection, 0 when not
// connected.
func (t *Transport) PDU() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil {
		return 0
	}
	return t.cur.pdu
}

// Open connects and runs the first read job of the first poll group,
// within ActivationBound. ctx is the owner context: the connection, and
// every reconnection after it, lives only while ctx does, and is closed at
// once when ctx ends.
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
	c, err := t.connected(actx)
	if err != nil {
		return err
	}
	if t.first == nil {
		return nil
	}
	job := pack(t.first.spans, c.pdu)[0]
	if _, _, err := t.readJobs(actx, t.first.spans, [][]chunk{job}); err != nil {
		return fmt.Errorf("device %q: first read: %w", t.name, err)
	}
	return nil
}

func (t *Transport) shut(reason error) {
	t.mu.Lock()
	t.closed = true
	t.endLife()
	c := t.cur
	t.cur = nil
	t.setStateLocked(false, reason)
	t.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// Close closes the connection, interrupting a job in flight rather than
// waiting for it, so it returns within CloseBound. It is safe to call
// twice.
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

// connected returns the live connection or makes one under ctx and the
// owner context. The caller holds t.io.
func (t *Transport) connected(ctx context.Context) (*conn, error) {
	t.mu.Lock()
	owner, closed, cur := t.owner, t.closed, t.cur
	t.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("%w: device %q", ErrClosed, t.name)
	case owner == nil:
		return nil, fmt.Errorf("%w: device %q", ErrNotOpen, t.name)
	case cur != nil:
		return cur, nil
	}
	if err := transports.GuardRequest(ctx, owner); err != nil {
		return nil, fmt.Errorf("device %q: connect: %w", t.name, err)
	}
	c, err := t.dial(ctx, owner)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		err = fmt.Errorf("%w: device %q at %s (rack %d, slot %d): %w", ErrConnect, t.name, t.address, t.rack, t.slot, err)
		t.setState(false, err)
		return nil, err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		c.close()
		return nil, fmt.Errorf("%w: device %q", ErrClosed, t.name)
	}
	t.cur = c
	t.mu.Unlock()
	t.setState(true, nil)
	return c, nil
}

// dial opens the socket, hands it to a fresh gos7 handler and runs the
// COTP connection and PDU negotiation, all within connect_timeout.
func (t *Transport) dial(ctx, owner context.Context) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, t.connectTimeout)
	defer cancel()
	stopLife := context.AfterFunc(t.life, cancel)
	defer stopLife()
	stopOwner := context.AfterFunc(owner, cancel)
	defer stopOwner()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", t.address)
	if err != nil {
		return nil, err
	}
	// The handshake runs inside gos7 without a context: closing the socket
	// is what ends it early.
	stopHandshake := context.AfterFunc(dctx, func() { _ = nc.Close() })
	defer stopHandshake()
	h := gos7.NewTCPClientHandler(t.address, t.rack, t.slot)
	// gos7 bounds each handshake exchange by Timeout and then reports a
	// bare "invalid PDU"; a looser backstop lets dctx end the handshake,
	// so a timeout is reported as one.
	h.Timeout = t.connectTimeout + time.Second
	// gos7's idle timer would close the socket behind our back and leave
	// a nil connection that fails every later request.
	h.IdleTimeout = 0
	if err := adoptConn(h, nc); err != nil {
		_ = nc.Close()
		return nil, err
	}
	if err := h.Connect(); err != nil {
		_ = nc.Close()
		if dctx.Err() != nil {
			return nil, fmt.Errorf("COTP/PDU handshake: %w", dctx.Err())
		}
		return nil, fmt.Errorf("COTP/PDU handshake: %w", err)
	}
	if h.PDULength < readAckHeader+readItemHeader+8 || h.PDULength > 960 {
		_ = nc.Close()
		return nil, fmt.Errorf("%w: the PLC negotiated a PDU length of %d", ErrIO, h.PDULength)
	}
	h.Timeout = t.requestTimeout
	return &conn{h: h, c: gos7.NewClient(h), nc: nc, pdu: h.PDULength}, nil
}

// adoptConn puts nc into the handler's unexported connection field, which
// gos7 dials only while it is nil. gos7 offers no dialer hook, and a socket
// only gos7 can close cannot be closed while an exchange holds gos7's lock.
// The version is pinned in go.mod and TestAdoptConn fails if the field
// moves.
func adoptConn(h *gos7.TCPClientHandler, nc net.Conn) error {
	f := reflect.ValueOf(h).Elem().FieldByName("conn")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*net.Conn)(nil)).Elem() {
		return fmt.Errorf("%w: TCPClientHandler has no conn field of type net.Conn", ErrLibrary)
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(nc))
	return nil
}

// run executes one exchange on c bounded by request_timeout and ctx; any
// failure closes the connection. The caller holds t.io.
func (t *Transport) run(ctx context.Context, c *conn, what string, fn func() error) error {
	t.mu.Lock()
	owner := t.owner
	t.mu.Unlock()
	if err := transports.GuardRequest(ctx, owner); err != nil {
		// Nothing went on the wire; the connection is as good as before.
		return fmt.Errorf("device %q: %s: %w", t.name, what, err)
	}
	timeout := t.requestTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	c.h.Timeout = timeout
	stop := context.AfterFunc(ctx, func() { _ = c.nc.Close() })
	start := time.Now()
	err := fn()
	stop()
	if err == nil {
		t.setState(true, nil)
		return nil
	}
	var ie *ItemError
	if errors.As(err, &ie) {
		t.setState(true, nil)
		return err
	}
	t.drop(c)
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	switch {
	case closed:
		err = fmt.Errorf("%w: device %q: %s interrupted: %w", ErrClosed, t.name, what, err)
	case ctx.Err() != nil:
		err = fmt.Errorf("device %q: %s: %w", t.name, what, context.Cause(ctx))
	case errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) >= timeout:
		err = fmt.Errorf("%w: device %q at %s: %s: no reply within %v", ErrTimeout, t.name, t.address, what, timeout)
	default:
		err = fmt.Errorf("%w: device %q at %s: %s: %w", ErrIO, t.name, t.address, what, err)
	}
	t.setState(false, err)
	return err
}

func (t *Transport) drop(c *conn) {
	t.mu.Lock()
	if t.cur == c {
		t.cur = nil
	}
	t.mu.Unlock()
	c.close()
}

// readJobs runs read jobs over spans and returns each span's bytes or its
// item error; err is set when the connection failed.
func (t *Transport) readJobs(ctx context.Context, ss []span, jobs [][]chunk) (bufs [][]byte, itemErrs []error, err error) {
	bufs = make([][]byte, len(ss))
	itemErrs = make([]error, len(ss))
	for i, s := range ss {
		bufs[i] = make([]byte, s.size)
	}
	for _, job := range jobs {
		c, err := t.connected(ctx)
		if err != nil {
			return nil, nil, err
		}
		items := make([]gos7.S7DataItem, len(job))
		for i, ch := range job {
			s := ss[ch.span]
			items[i] = gos7.S7DataItem{Area: int(s.area), WordLen: wordLenByte, DBNumber: s.db, Start: s.start + ch.offset, Amount: ch.size, Data: make([]byte, ch.size)}
		}
		what := fmt.Sprintf("read job of %d items", len(items))
		if err := t.run(ctx, c, what, func() error { return c.c.AGReadMulti(items, len(items)) }); err != nil {
			return nil, nil, err
		}
		for i, ch := range job {
			if items[i].Error != "" {
				itemErrs[ch.span] = &ItemError{Text: items[i].Error}
				continue
			}
			copy(bufs[ch.span][ch.offset:], items[i].Data)
		}
	}
	return bufs, itemErrs, nil
}

// wordLenByte is S7's byte transport size; multi-byte values are read as
// bytes and decoded here.
const wordLenByte = 0x02

// Poll reads every tag of a group in as few jobs as the PDU allows. An
// item the PLC refuses marks its tags Bad; when it covered several tags
// they are read one by one, so one bad address spoils only its own tag.
// Poll fails, with every value Bad, only when the PLC cannot be reached.
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
	fail := func(err error) ([]transports.Value, error) {
		now := time.Now()
		for i := range vals {
			if vals[i].Err == nil && vals[i].Quality == transports.Bad {
				vals[i].Err, vals[i].Timestamp = err, now
			}
		}
		return vals, err
	}
	c, err := t.connected(ctx)
	if err != nil {
		return fail(err)
	}
	bufs, itemErrs, err := t.readJobs(ctx, g.spans, pack(g.spans, c.pdu))
	if err != nil {
		return fail(err)
	}
	now := time.Now()
	for si, s := range g.spans {
		if itemErrs[si] == nil {
			for _, i := range s.tags {
				vals[i] = value(g.tags[i], bufs[si][g.tags[i].start-s.start:], now)
			}
			continue
		}
		if len(s.tags) == 1 {
			vals[s.tags[0]] = bad(g.tags[s.tags[0]], itemErrs[si], now)
			continue
		}
		for _, i := range s.tags {
			tg := g.tags[i]
			one := []span{{area: tg.area, db: tg.db, start: tg.start, size: tg.size, tags: []int{0}}}
			c, err := t.connected(ctx)
			if err != nil {
				return fail(err)
			}
			b, ie, err := t.readJobs(ctx, one, pack(one, c.pdu))
			now := time.Now()
			switch {
			case err != nil:
				return fail(err)
			case ie[0] != nil:
				vals[i] = bad(tg, ie[0], now)
			default:
				vals[i] = value(tg, b[0], now)
			}
		}
	}
	return vals, nil
}

func value(tg *tag, b []byte, now time.Time) transports.Value {
	return transports.Value{Tag: tg.name, Value: tagvalue.Scale(decode(tg, b[:tg.size]), tg.scale, tg.offset), Quality: transports.Good, Timestamp: now}
}

func bad(tg *tag, err error, now time.Time) transports.Value {
	return transports.Value{Tag: tg.name, Quality: transports.Bad, Timestamp: now,
		Err: fmt.Errorf("tag %q at %s: %w", tg.name, tg.address, err)}
}

// Write writes one writable tag: a bool as a single bit (the PLC sets it
// without touching its neighbours), anything else as bytes, in as many
// jobs as the PDU requires. value may be a bool, any Go number, a
// json.Number or a decimal string; scale and offset are inverted first.
func (t *Transport) Write(ctx context.Context, name string, value any) error {
	tg, ok := t.tags[name]
	if !ok {
		return fmt.Errorf("%w %q on device %q", ErrUnknownTag, name, t.name)
	}
	if !tg.writable {
		return fmt.Errorf("%w: tag %q on device %q (set writable: true)", ErrReadOnly, name, t.name)
	}
	wrap := func(err error) error {
		return fmt.Errorf("write tag %q at %s on device %q: %w", tg.name, tg.address, t.name, err)
	}
	var data []byte
	if tg.typ == typeBool {
		b, err := tagvalue.Bool(value)
		if err != nil {
			return wrap(fmt.Errorf("%w: %w", ErrValue, err))
		}
		if b {
			data = []byte{1}
		} else {
			data = []byte{0}
		}
	} else {
		var err error
		if data, err = encode(tg, value); err != nil {
			return wrap(err)
		}
	}
	t.io.Lock()
	defer t.io.Unlock()
	c, err := t.connected(ctx)
	if err != nil {
		return wrap(err)
	}
	if tg.typ == typeBool {
		req := writeRequest(tg.area, tg.db, tg.start*8+tg.bit, true, data)
		return wrapNil(wrap, t.run(ctx, c, "write bit", func() error { return sendWrite(c.h, req) }))
	}
	maxData := c.pdu - writeOverhead
	for off := 0; off < len(data); off += maxData {
		c, err := t.connected(ctx)
		if err != nil {
			return wrap(err)
		}
		part := data[off:min(len(data), off+maxData)]
		req := writeRequest(tg.area, tg.db, (tg.start+off)*8, false, part)
		if err := t.run(ctx, c, fmt.Sprintf("write %d bytes", len(part)), func() error { return sendWrite(c.h, req) }); err != nil {
			return wrap(err)
		}
	}
	return nil
}

func wrapNil(wrap func(error) error, err error) error {
	if err == nil {
		return nil
	}
	return wrap(err)
}

// writeRequest frames a write-var job with one item: bytes at a byte
// address, or one bit at a bit address.
func writeRequest(a area, db, bitAddr int, isBit bool, data []byte) []byte {
	ts, dts, count, length := byte(0x02), byte(0x04), len(data), len(data)*8
	if isBit {
		ts, dts, count, length = 0x01, 0x03, 1, 1
	}
	req := []byte{
		3, 0, 0, 0, // TPKT, length below
		2, 0xF0, 0x80, // COTP data
		0x32, 1, 0, 0, 0, 5, 0, 14, 0, 0, // S7 job header; data length below
		5, 1, // write var, one item
		0x12, 0x0A, 0x10, ts, 0, 0, 0, 0, byte(a), byte(bitAddr >> 16), byte(bitAddr >> 8), byte(bitAddr),
		0, dts, 0, 0,
	}
	binary.BigEndian.PutUint16(req[23:], uint16(count))
	binary.BigEndian.PutUint16(req[25:], uint16(db))
	binary.BigEndian.PutUint16(req[33:], uint16(length))
	binary.BigEndian.PutUint16(req[15:], uint16(4+len(data)))
	req = append(req, data...)
	binary.BigEndian.PutUint16(req[2:], uint16(len(req)))
	return req
}

// sendWrite sends a write job through gos7's transport and checks the
// item's return code.
func sendWrite(h *gos7.TCPClientHandler, req []byte) error {
	resp, err := h.Send(req)
	if err != nil {
		return err
	}
	if len(resp) == 22 && resp[19] == 5 {
		if resp[21] == 0xFF {
			return nil
		}
		return &ItemError{Code: resp[21]}
	}
	if len(resp) >= 19 && (resp[17] != 0 || resp[18] != 0) {
		return fmt.Errorf("PLC refused the write job: error class %#02x code %#02x", resp[17], resp[18])
	}
	return fmt.Errorf("malformed write reply of %d bytes", len(resp))
}

// Interface checks.
var (
	_ transports.Poller = (*Transport)(nil)
	_ transports.Writer = (*Transport)(nil)
)
