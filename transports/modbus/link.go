package modbus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goburrow/modbus"
	"github.com/goburrow/serial"
)

// link is one open connection to a device. It is the goburrow Transporter
// of one goburrow Client: goburrow frames, verifies and decodes, while the
// link owns the socket or port, because goburrow's own transporters dial
// without a context, cannot be interrupted from another goroutine, keep a
// broken socket open after a timeout (so the next reply pairs with the wrong
// request) and, for RTU, neither lock the port nor read exception replies.
type link interface {
	modbus.Transporter
	// setDeadline bounds every exchange until the next call.
	setDeadline(time.Time)
	// close interrupts any exchange in flight and releases the connection;
	// it is safe from any goroutine and more than once.
	close() error
}

// tcpLink is a Modbus TCP connection.
type tcpLink struct {
	conn     net.Conn
	deadline time.Time
	// buf receives a reply; exchanges on a link are serialized.
	buf [maxTCPADU]byte
}

func (l *tcpLink) setDeadline(d time.Time) { l.deadline = d }

func (l *tcpLink) close() error { return l.conn.Close() }

const (
	// mbapHeader is the Modbus TCP header: transaction, protocol, length,
	// unit.
	mbapHeader = 7
	// maxTCPADU is the longest Modbus TCP ADU: the header and a PDU of at
	// most 253 bytes.
	maxTCPADU = mbapHeader + 253
)

// Send writes one ADU and reads one reply, bounded by the deadline. A
// reply usually arrives in one segment, so it reads what has arrived (at
// least the header) and then only what the header says is still missing.
// Bytes beyond the reply are a malformed reply: only one request is in
// flight, so nothing else may follow it.
func (l *tcpLink) Send(adu []byte) ([]byte, error) {
	if err := l.conn.SetDeadline(l.deadline); err != nil {
		return nil, err
	}
	if _, err := l.conn.Write(adu); err != nil {
		return nil, err
	}
	got, err := io.ReadAtLeast(l.conn, l.buf[:], mbapHeader)
	if err != nil {
		return nil, err
	}
	// The length counts the unit id and the PDU; a PDU is at most 253 bytes.
	n := int(binary.BigEndian.Uint16(l.buf[4:]))
	if n < 2 || n > 254 {
		return nil, fmt.Errorf("%w: MBAP length %d outside 2..254", ErrFrame, n)
	}
	size := mbapHeader - 1 + n
	if got > size {
		return nil, fmt.Errorf("%w: %d bytes after a reply of %d", ErrFrame, got-size, size)
	}
	if _, err := io.ReadFull(l.conn, l.buf[got:size]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the header came, the rest did not
		}
		return nil, err
	}
	return append([]byte(nil), l.buf[:size]...), nil
}

// rtuLink is a Modbus RTU serial line. goburrow/serial's port is not safe
// to close while another goroutine reads it (both touch its descriptor), so
// reads poll in short slices (the port's own timeout) and a close requested
// during an exchange is carried out by the exchange itself, within one
// slice.
type rtuLink struct {
	port       io.ReadWriteCloser
	deadline   time.Time
	frameDelay time.Duration // the 3.5-character silence between frames
	last       time.Time     // end of the previous exchange

	mu      sync.Mutex
	busy    bool // an exchange is using the port
	closing bool // close was asked for
	closed  bool
}

// rtuReadSlice is the serial read timeout: how often a waiting exchange
// checks for a close request and its deadline.
const rtuReadSlice = 20 * time.Millisecond

// errRTUClosed ends an exchange whose link was closed meanwhile.
var errRTUClosed = errors.New("serial line closed")

func (l *rtuLink) setDeadline(d time.Time) { l.deadline = d }

// close closes the port now, or asks the running exchange to do so.
func (l *rtuLink) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	if l.busy || l.closed {
		return nil
	}
	l.closed = true
	return l.port.Close()
}

// begin marks an exchange running, unless the link is closing.
func (l *rtuLink) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return errRTUClosed
	}
	l.busy = true
	return nil
}

// end finishes an exchange, closing the port if that was asked meanwhile.
func (l *rtuLink) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy = false
	if l.closing && !l.closed {
		l.closed = true
		_ = l.port.Close()
	}
}

// Read reads what the line has, waiting in slices until the deadline or a
// close request.
func (l *rtuLink) Read(p []byte) (int, error) {
	for {
		l.mu.Lock()
		closing := l.closing
		l.mu.Unlock()
		if closing {
			return 0, errRTUClosed
		}
		if !l.deadline.IsZero() && !time.Now().Before(l.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := l.port.Read(p)
		if n == 0 && errors.Is(err, serial.ErrTimeout) {
			continue
		}
		return n, err
	}
}

// rtuFrameDelay is the inter-frame silence for a baud rate: 3.5 characters
// of 11 bits, and a fixed 1.75 ms above 19200 baud as the specification
// recommends.
func rtuFrameDelay(baud int) time.Duration {
	if baud <= 0 || baud > 19200 {
		return 1750 * time.Microsecond
	}
	return time.Duration(35_000_000/baud) * time.Microsecond
}

// Send writes one RTU frame and reads the reply, whose length it derives
// from the function code and byte count, exception replies included.
func (l *rtuLink) Send(adu []byte) ([]byte, error) {
	if len(adu) < 4 {
		return nil, fmt.Errorf("%w: RTU request of %d bytes", ErrFrame, len(adu))
	}
	if wait := l.frameDelay - time.Since(l.last); wait > 0 {
		time.Sleep(wait)
	}
	if err := l.begin(); err != nil {
		return nil, err
	}
	defer l.end()
	defer func() { l.last = time.Now() }()
	if _, err := l.port.Write(adu); err != nil {
		return nil, err
	}
	resp := make([]byte, 2, 256)
	if _, err := io.ReadFull(l, resp); err != nil {
		return nil, err
	}
	var rest int
	switch fc := resp[1]; {
	case fc&0x80 != 0:
		rest = 3 // exception code + CRC
	case fc == modbus.FuncCodeReadCoils, fc == modbus.FuncCodeReadDiscreteInputs,
		fc == modbus.FuncCodeReadHoldingRegisters, fc == modbus.FuncCodeReadInputRegisters,
		fc == modbus.FuncCodeReadWriteMultipleRegisters:
		resp = resp[:3]
		if _, err := io.ReadFull(l, resp[2:3]); err != nil {
			return nil, err
		}
		rest = int(resp[2]) + 2
	case fc == modbus.FuncCodeWriteSingleCoil, fc == modbus.FuncCodeWriteSingleRegister,
		fc == modbus.FuncCodeWriteMultipleCoils, fc == modbus.FuncCodeWriteMultipleRegisters:
		rest = 6
	case fc == modbus.FuncCodeMaskWriteRegister:
		rest = 8
	default:
		return nil, fmt.Errorf("%w: RTU reply with function code %d", ErrFrame, fc)
	}
	n := len(resp)
	resp = resp[:n+rest]
	if _, err := io.ReadFull(l, resp[n:]); err != nil {
		return nil, err
	}
	return resp, nil
}
