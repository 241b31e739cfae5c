// Package s7test is a small in-process S7 server for tests. It speaks the
// exchange robinson/gos7 performs over ISO-on-TCP (RFC 1006): COTP
// connection request, S7 setup communication (PDU negotiation), read var
// and write var with one or more items, in DB, M, I and Q areas. It checks
// the rack and slot in the remote TSAP, refuses replies larger than the
// negotiated PDU the way a CPU does, and answers addresses beyond an
// area's size with "address out of range" and unknown DBs with "object
// does not exist", so a client's batching and error handling meet the
// same limits as on a PLC.
package s7test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// S7 area codes.
const (
	AreaI  byte = 0x81 // process inputs (E)
	AreaQ  byte = 0x82 // process outputs (A)
	AreaM  byte = 0x83 // markers (flags)
	AreaDB byte = 0x84 // data blocks
)

// Return codes of a data item.
const (
	retOK          byte = 0xFF
	retOutOfRange  byte = 0x05
	retUnavailable byte = 0x0A
)

// Server is a running S7 test server. Its methods are safe for concurrent
// use.
type Server struct {
	rack, slot int
	maxPDU     int

	mu      sync.Mutex
	ln      net.Listener
	addr    string
	areas   map[byte][]byte
	dbs     map[int][]byte
	conns   map[net.Conn]bool
	peak    int
	total   int
	jobs    int // read and write jobs served
	maxSeen int // largest negotiated PDU handed out
	hang    chan struct{}
	wg      sync.WaitGroup
}

// Start listens on 127.0.0.1 on a free port. rack and slot are the CPU's;
// a connection request for another TSAP is refused. maxPDU caps the PDU
// length the server negotiates (240 on an S7-300, 480 on an S7-1500).
func Start(rack, slot, maxPDU int) (*Server, error) {
	s := &Server{rack: rack, slot: slot, maxPDU: maxPDU, areas: map[byte][]byte{
		AreaI: make([]byte, 128), AreaQ: make([]byte, 128), AreaM: make([]byte, 256),
	}, dbs: map[int][]byte{}, conns: map[net.Conn]bool{}}
	if err := s.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("s7test: listen on %s: %w", addr, err)
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stop closes the listener and every connection, as a PLC that powers
// down; Restart brings it back on the same address with its memory kept.
func (s *Server) Stop() {
	s.mu.Lock()
	ln := s.ln
	s.ln = nil
	for c := range s.conns {
		_ = c.Close()
	}
	hang := s.hang
	s.hang = nil
	s.mu.Unlock()
	if hang != nil {
		close(hang)
	}
	if ln != nil {
		_ = ln.Close()
	}
	s.wg.Wait()
}

// Restart listens again on the address of the first start.
func (s *Server) Restart() error { return s.listen(s.Addr()) }

// Close stops the server.
func (s *Server) Close() { s.Stop() }

// Hang makes the server read requests and never answer them, until
// Unhang.
func (s *Server) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hang == nil {
		s.hang = make(chan struct{})
	}
}

// Unhang lets held and later requests be answered.
func (s *Server) Unhang() {
	s.mu.Lock()
	hang := s.hang
	s.hang = nil
	s.mu.Unlock()
	if hang != nil {
		close(hang)
	}
}

// SetDB creates or replaces data block n with a copy of data.
func (s *Server) SetDB(n int, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dbs[n] = append([]byte(nil), data...)
}

// DB returns a copy of data block n.
func (s *Server) DB(n int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.dbs[n]...)
}

// SetArea writes data into area (AreaI, AreaQ, AreaM) at offset.
func (s *Server) SetArea(area byte, offset int, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(s.areas[area][offset:], data)
}

// Area returns a copy of n bytes of area from offset.
func (s *Server) Area(area byte, offset, n int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.areas[area][offset:offset+n]...)
}

// Conns reports connections open now, the most ever open at once, and
// the total accepted.
func (s *Server) Conns() (now, peak, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns), s.peak, s.total
}

// NegotiatedPDU is the largest PDU length the server has agreed to.
func (s *Server) NegotiatedPDU() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxSeen
}

// Jobs is the number of read and write jobs answered.
func (s *Server) Jobs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs
}

func (s *Server) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.total++
		s.peak = max(s.peak, len(s.conns))
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.serve(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

var errProtocol = errors.New("s7test: protocol violation")

// readFrame reads one TPKT frame.
func readFrame(c net.Conn) ([]byte, error) {
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, err
	}
	if hdr[0] != 3 || hdr[1] != 0 {
		return nil, fmt.Errorf("%w: TPKT header % x", errProtocol, hdr)
	}
	n := int(binary.BigEndian.Uint16(hdr[2:]))
	if n < 7 {
		return nil, fmt.Errorf("%w: TPKT length %d", errProtocol, n)
	}
	f := make([]byte, n)
	copy(f, hdr)
	if _, err := io.ReadFull(c, f[4:]); err != nil {
		return nil, err
	}
	return f, nil
}

func (s *Server) serve(c net.Conn) error {
	pdu := 0
	for {
		f, err := readFrame(c)
		if err != nil {
			return err
		}
		s.mu.Lock()
		hang := s.hang
		s.mu.Unlock()
		if hang != nil {
			<-hang
			continue // the request is lost, as on a stalled link
		}
		var reply []byte
		switch {
		case f[5] == 0xE0: // COTP connection request
			if len(f) != 22 {
				return fmt.Errorf("%w: CR of %d bytes", errProtocol, len(f))
			}
			tsap := int(binary.BigEndian.Uint16(f[20:22]))
			if want := 0x0100 + s.rack*0x20 + s.slot; tsap != want {
				return fmt.Errorf("s7test: remote TSAP %#04x, this CPU is %#04x (rack %d slot %d)", tsap, want, s.rack, s.slot)
			}
			reply = append([]byte(nil), f...)
			reply[5] = 0xD0
		case f[5] == 0xF0 && len(f) >= 19 && f[7] == 0x32 && f[8] == 1:
			reply, pdu, err = s.job(f, pdu)
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: frame % x", errProtocol, f)
		}
		if _, err := c.Write(reply); err != nil {
			return err
		}
	}
}

// ackData builds an ack-data frame for the job in f.
func ackData(f []byte, param, data []byte, errClass, errCode byte) []byte {
	out := []byte{3, 0, 0, 0, 2, 0xF0, 0x80, 0x32, 3, 0, 0, f[11], f[12], 0, 0, 0, 0, errClass, errCode}
	binary.BigEndian.PutUint16(out[13:], uint16(len(param)))
	binary.BigEndian.PutUint16(out[15:], uint16(len(data)))
	out = append(append(out, param...), data...)
	binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
	return out
}

func (s *Server) job(f []byte, pdu int) ([]byte, int, error) {
	parLen := int(binary.BigEndian.Uint16(f[13:15]))
	dataLen := int(binary.BigEndian.Uint16(f[15:17]))
	if 17+parLen+dataLen != len(f) || parLen < 1 {
		return nil, pdu, fmt.Errorf("%w: lengths param %d data %d in a frame of %d", errProtocol, parLen, dataLen, len(f))
	}
	param, data := f[17:17+parLen], f[17+parLen:]
	switch param[0] {
	case 0xF0: // setup communication
		if parLen != 8 {
			return nil, pdu, fmt.Errorf("%w: setup of %d bytes", errProtocol, parLen)
		}
		pdu = min(int(binary.BigEndian.Uint16(param[6:8])), s.maxPDU)
		p := append([]byte(nil), param...)
		binary.BigEndian.PutUint16(p[6:], uint16(pdu))
		s.mu.Lock()
		s.maxSeen = max(s.maxSeen, pdu)
		s.mu.Unlock()
		return ackData(f, p, nil, 0, 0), pdu, nil
	case 0x04, 0x05:
		if pdu == 0 {
			return nil, pdu, fmt.Errorf("%w: job before setup communication", errProtocol)
		}
		if len(f)-7 > pdu {
			return nil, pdu, fmt.Errorf("%w: request of %d bytes over the PDU of %d", errProtocol, len(f)-7, pdu)
		}
		n := int(param[1])
		if parLen != 2+12*n {
			return nil, pdu, fmt.Errorf("%w: %d items in %d parameter bytes", errProtocol, n, parLen)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.jobs++
		var out []byte
		var err error
		if param[0] == 0x04 {
			out, err = s.read(param[2:], n)
		} else {
			out, err = s.write(param[2:], data, n)
		}
		if err != nil {
			return nil, pdu, err
		}
		if 14+len(out) > pdu {
			// A CPU refuses a job whose answer does not fit the PDU.
			return ackData(f, []byte{param[0], 0}, nil, 0x85, 0x00), pdu, nil
		}
		return ackData(f, []byte{param[0], byte(n)}, out, 0, 0), pdu, nil
	}
	return nil, pdu, fmt.Errorf("%w: function %#02x", errProtocol, param[0])
}

// item is one decoded variable specification.
type item struct {
	ts    byte // 1 bit, 2 byte
	count int
	db    int
	area  byte
	addr  int // bit address
}

func parseItem(b []byte) (item, error) {
	if b[0] != 0x12 || b[1] != 0x0A || b[2] != 0x10 {
		return item{}, fmt.Errorf("%w: item spec % x", errProtocol, b)
	}
	return item{ts: b[3], count: int(binary.BigEndian.Uint16(b[4:])), db: int(binary.BigEndian.Uint16(b[6:])),
		area: b[8], addr: int(b[9])<<16 | int(b[10])<<8 | int(b[11])}, nil
}

// memory returns the bytes an item addresses; the caller holds s.mu.
func (s *Server) memory(it item) ([]byte, byte) {
	var mem []byte
	if it.area == AreaDB {
		m, ok := s.dbs[it.db]
		if !ok {
			return nil, retUnavailable
		}
		mem = m
	} else {
		m, ok := s.areas[it.area]
		if !ok {
			return nil, retUnavailable
		}
		mem = m
	}
	return mem, retOK
}

func (s *Server) read(spec []byte, n int) ([]byte, error) {
	var out []byte
	for i := 0; i < n; i++ {
		it, err := parseItem(spec[12*i : 12*i+12])
		if err != nil {
			return nil, err
		}
		if i > 0 && len(out)%2 == 1 {
			out = append(out, 0) // items start on even offsets
		}
		mem, ret := s.memory(it)
		switch it.ts {
		case 0x01:
			if ret == retOK && (it.count != 1 || it.addr/8 >= len(mem)) {
				ret = retOutOfRange
			}
			if ret != retOK {
				out = append(out, ret, 0, 0, 0)
				continue
			}
			out = append(out, retOK, 0x03, 0, 1, (mem[it.addr/8]>>(it.addr%8))&1)
		case 0x02:
			start := it.addr / 8
			if ret == retOK && (it.addr%8 != 0 || start+it.count > len(mem)) {
				ret = retOutOfRange
			}
			if ret != retOK {
				out = append(out, ret, 0, 0, 0)
				continue
			}
			out = append(out, retOK, 0x04, byte(it.count*8>>8), byte(it.count*8))
			out = append(out, mem[start:start+it.count]...)
		default:
			return nil, fmt.Errorf("%w: read transport size %#02x", errProtocol, it.ts)
		}
	}
	return out, nil
}

func (s *Server) write(spec, data []byte, n int) ([]byte, error) {
	out := make([]byte, 0, n)
	off := 0
	for i := 0; i < n; i++ {
		it, err := parseItem(spec[12*i : 12*i+12])
		if err != nil {
			return nil, err
		}
		if off+4 > len(data) {
			return nil, fmt.Errorf("%w: write data truncated", errProtocol)
		}
		dts, l := data[off+1], int(binary.BigEndian.Uint16(data[off+2:]))
		size := l
		if dts == 0x04 {
			size = l / 8
		}
		if off+4+size > len(data) {
			return nil, fmt.Errorf("%w: write data truncated", errProtocol)
		}
		val := data[off+4 : off+4+size]
		off += 4 + size
		if size%2 == 1 && i < n-1 {
			off++
		}
		mem, ret := s.memory(it)
		switch {
		case ret != retOK:
		case it.ts == 0x01 && dts == 0x03 && size == 1:
			if it.addr/8 >= len(mem) {
				ret = retOutOfRange
				break
			}
			if val[0]&1 == 1 {
				mem[it.addr/8] |= 1 << (it.addr % 8)
			} else {
				mem[it.addr/8] &^= 1 << (it.addr % 8)
			}
		case it.ts == 0x02 && dts == 0x04 && size == it.count:
			start := it.addr / 8
			if it.addr%8 != 0 || start+size > len(mem) {
				ret = retOutOfRange
				break
			}
			copy(mem[start:], val)
		default:
			return nil, fmt.Errorf("%w: write item ts %#02x data ts %#02x length %d", errProtocol, it.ts, dts, l)
		}
		out = append(out, ret)
	}
	return out, nil
}
