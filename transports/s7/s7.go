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
// The configuration is a *routes.Device of kind s7.
package s7

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"time"
	"unsafe"

	"github.com/robinson/gos7"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// Sentinel errors every device transport has (transports.DeviceErrors),
// each reading "s7: ...".
var (
	errs = transports.NewDeviceErrors("s7")

	ErrConfig, ErrClosed, ErrNotOpen, ErrConnect, ErrTimeout     = errs.Config, errs.Closed, errs.NotOpen, errs.Connect, errs.Timeout
	ErrIO, ErrUnknownGroup, ErrUnknownTag, ErrReadOnly, ErrValue = errs.IO, errs.UnknownGroup, errs.UnknownTag, errs.ReadOnly, errs.Value
)

// Sentinel errors of this package alone. Every error the package returns
// wraps one of these or of the shared ones above (or a context error) and
// names the device, tag or address at fault.
var (
	// ErrAddress reports a tag address that does not parse.
	ErrAddress = errors.New("s7: invalid address")
	// ErrItem matches every ItemError with errors.Is.
	ErrItem = errors.New("s7: PLC refused the item")
	// ErrLibrary reports a gos7 build whose internals this package does not
	// recognise; it cannot hand the library its socket.
	ErrLibrary = errors.New("s7: unsupported gos7 version")
)

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
// use; requests are serialized (gos7 handles one exchange at a time). The
// embedded Conn holds the connection's owner-bound lifecycle.
type Transport struct {
	*transports.Conn[*conn]
	name       string
	address    string
	rack, slot int

	connectTimeout, requestTimeout time.Duration

	*transports.Catalog[*group, *tag]
	first *group
}

// New builds a transport for an s7 device, checking every tag.
func New(name string, dev *routes.Device) (*Transport, error) {
	if err := transports.CheckKind(name, dev, Kind, errs); err != nil {
		return nil, err
	}
	cfg, err := settings(dev)
	if err == nil {
		err = checkRackSlot(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: device %q: %w", ErrConfig, name, err)
	}
	t := &Transport{name: name, rack: cfg.Rack, slot: cfg.Slot}
	if t.address, err = dialAddress(dev.Address); err != nil {
		return nil, fmt.Errorf("%w: device %q: %w", ErrConfig, name, err)
	}
	t.Catalog, err = transports.NewCatalog(name, dev, []string{"poll"}, errs, parseTag,
		func(pg *routes.PollGroup, tags []*tag) *group {
			g := &group{name: pg.Name, tags: tags, spans: spans(tags)}
			if t.first == nil && len(g.spans) > 0 {
				t.first = g
			}
			return g
		})
	if err != nil {
		return nil, err
	}
	var closing time.Duration
	t.connectTimeout, t.requestTimeout, closing = dev.Timeouts()
	t.Conn = transports.NewConn(transports.ConnConfig[*conn]{
		Name: name, Where: fmt.Sprintf("%s (rack %d, slot %d)", t.address, t.rack, t.slot),
		ConnectTimeout: t.connectTimeout, RequestTimeout: t.requestTimeout, CloseTimeout: closing,
		Errors: errs,
		Dial:   t.dial,
		Hangup: (*conn).close,
	})
	return t, nil
}

// PDU is the PDU length negotiated on the current connection, 0 when not
// connected.
func (t *Transport) PDU() int {
	if c := t.Held(); c != nil {
		return c.pdu
	}
	return 0
}

// Open connects and runs the first read job of the first poll group,
// within ActivationBound. ctx is the owner context: the connection, and
// every reconnection after it, lives only while ctx does, and is closed at
// once when ctx ends.
func (t *Transport) Open(ctx context.Context) error {
	return t.Conn.Open(ctx, func(actx context.Context) error {
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
	})
}

// connected returns the live connection or makes one. The caller holds
// the Conn's Lock.
func (t *Transport) connected(ctx context.Context) (*conn, error) {
	c, fresh, err := t.Current(ctx)
	if fresh {
		t.SetState(true, nil)
	}
	return c, err
}

// dial opens the socket, hands it to a fresh gos7 handler and runs the
// COTP connection and PDU negotiation; dctx ends at connect_timeout.
func (t *Transport) dial(dctx context.Context) (*conn, error) {
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
// failure but an item the PLC refused closes the connection. The caller
// holds the Conn's Lock.
func (t *Transport) run(ctx context.Context, c *conn, what string, fn func() error) error {
	timeout := t.requestTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	c.h.Timeout = timeout
	end, err := t.Begin(ctx, c, what)
	if err != nil {
		return err
	}
	start := time.Now()
	err = fn()
	end()
	if err == nil {
		t.SetState(true, nil)
		return nil
	}
	var ie *ItemError
	if errors.As(err, &ie) {
		t.SetState(true, nil)
		return err
	}
	return t.Failed(ctx, c, what, err, errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) >= timeout)
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
	g, vals, err := t.Group(name)
	if err != nil {
		return nil, err
	}
	t.Lock()
	defer t.Unlock()
	fail := func(err error) ([]transports.Value, error) { return transports.FailUnread(vals, err) }
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
	tg, err := t.Writable(name)
	if err != nil {
		return err
	}
	wrap := func(err error) error {
		return fmt.Errorf("write tag %q at %s on device %q: %w", tg.name, tg.address, t.name, err)
	}
	var data []byte
	if tg.typ == tagvalue.TypeBool {
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
	t.Lock()
	defer t.Unlock()
	c, err := t.connected(ctx)
	if err != nil {
		return wrap(err)
	}
	if tg.typ == tagvalue.TypeBool {
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
