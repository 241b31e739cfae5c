package modbus

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/goburrow/modbus"
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
}

func (l *tcpLink) setDeadline(d time.Time) { l.deadline = d }

func (l *tcpLink) close() error { return l.conn.Close() }

// mbapHeader is the Modbus TCP header: transaction, protocol, length, unit.
const mbapHeader = 7

// Send writes one ADU and reads one reply, bounded by the deadline.
func (l *tcpLink) Send(adu []byte) ([]byte, error) {
	if err := l.conn.SetDeadline(l.deadline); err != nil {
		return nil, err
	}
	if _, err := l.conn.Write(adu); err != nil {
		return nil, err
	}
	var hdr [mbapHeader]byte
	if _, err := io.ReadFull(l.conn, hdr[:]); err != nil {
		return nil, err
	}
	// The length counts the unit id and the PDU; a PDU is at most 253 bytes.
	n := int(binary.BigEndian.Uint16(hdr[4:]))
	if n < 2 || n > 254 {
		return nil, fmt.Errorf("%w: MBAP length %d outside 2..254", ErrFrame, n)
	}
	resp := make([]byte, mbapHeader-1+n)
	copy(resp, hdr[:])
	if _, err := io.ReadFull(l.conn, resp[mbapHeader:]); err != nil {
		return nil, err
	}
	return resp, nil
}

// rtuLink is a Modbus RTU serial line.
type rtuLink struct {
	port       io.ReadWriteCloser
	deadline   time.Time
	frameDelay time.Duration // the 3.5-character silence between frames
	last       time.Time     // end of the previous exchange

	mu     sync.Mutex
	closed bool
}

func (l *rtuLink) setDeadline(d time.Time) { l.deadline = d }

func (l *rtuLink) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.port.Close()
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
	defer func() { l.last = time.Now() }()
	// A serial port has no deadline; closing it is what ends a read that
	// outlives the request timeout.
	if !l.deadline.IsZero() {
		timer := time.AfterFunc(time.Until(l.deadline), func() { _ = l.close() })
		defer timer.Stop()
	}
	if _, err := l.port.Write(adu); err != nil {
		return nil, err
	}
	resp := make([]byte, 2, 256)
	if _, err := io.ReadFull(l.port, resp); err != nil {
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
		if _, err := io.ReadFull(l.port, resp[2:3]); err != nil {
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
	if _, err := io.ReadFull(l.port, resp[n:]); err != nil {
		return nil, err
	}
	return resp, nil
}
