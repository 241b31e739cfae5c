package s7test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// The exchange below is written out byte for byte from the wire format
// gos7 performs, independently of gos7 and of the server's code.

func exchange(t *testing.T, c net.Conn, req []byte) []byte {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(c, hdr); err != nil {
		t.Fatalf("reply to % x: %v", req, err)
	}
	out := append(hdr, make([]byte, int(binary.BigEndian.Uint16(hdr[2:]))-4)...)
	if _, err := io.ReadFull(c, out[4:]); err != nil {
		t.Fatal(err)
	}
	return out
}

func hexs(b []byte) string { return fmt.Sprintf("% X", b) }

func connect(t *testing.T, s *Server, tsap uint16) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cr := []byte{0x03, 0x00, 0x00, 0x16, 0x11, 0xE0, 0x00, 0x00, 0x00, 0x01, 0x00, 0xC0, 0x01, 0x0A, 0xC1, 0x02, 0x01, 0x00, 0xC2, 0x02, byte(tsap >> 8), byte(tsap)}
	cc := exchange(t, c, cr)
	want := append([]byte(nil), cr...)
	want[5] = 0xD0
	if !bytes.Equal(cc, want) {
		t.Fatalf("CC % X, want % X", cc, want)
	}
	setup := []byte{0x03, 0x00, 0x00, 0x19, 0x02, 0xF0, 0x80, 0x32, 0x01, 0x00, 0x00, 0x04, 0x00, 0x00, 0x08, 0x00, 0x00, 0xF0, 0x00, 0x00, 0x01, 0x00, 0x01, 0x01, 0xE0}
	ack := exchange(t, c, setup)
	if len(ack) != 27 || ack[17] != 0 || ack[18] != 0 || binary.BigEndian.Uint16(ack[25:27]) != 240 {
		t.Fatalf("setup reply % X: want 27 bytes, no error, PDU 240", ack)
	}
	return c
}

func readDB(db, start, n int) []byte {
	return []byte{0x03, 0x00, 0x00, 0x1F, 0x02, 0xF0, 0x80, 0x32, 0x01, 0x00, 0x00, 0x05, 0x00, 0x00, 0x0E, 0x00, 0x00, 0x04, 0x01,
		0x12, 0x0A, 0x10, 0x02, byte(n >> 8), byte(n), byte(db >> 8), byte(db), 0x84, byte(start * 8 >> 16), byte(start * 8 >> 8), byte(start * 8)}
}

func TestWireExchange(t *testing.T) {
	s, err := Start(0, 1, 240)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDB(1, []byte{1, 2, 3, 4, 5, 6})
	c := connect(t, s, 0x0101)

	got := exchange(t, c, readDB(1, 2, 3))
	want := []byte{0x03, 0x00, 0x00, 0x1C, 0x02, 0xF0, 0x80, 0x32, 0x03, 0x00, 0x00, 0x05, 0x00, 0x00, 0x02, 0x00, 0x07, 0x00, 0x00, 0x04, 0x01, 0xFF, 0x04, 0x00, 0x18, 3, 4, 5}
	if !bytes.Equal(got, want) {
		t.Errorf("read reply\n got %s\nwant %s", hexs(got), hexs(want))
	}
	if got := exchange(t, c, readDB(1, 5, 4)); got[21] != 0x05 {
		t.Errorf("read past the DB: item code %#02x, want 0x05 (out of range): % X", got[21], got)
	}
	if got := exchange(t, c, readDB(9, 0, 1)); got[21] != 0x0A {
		t.Errorf("read of a missing DB: item code %#02x, want 0x0A (not available): % X", got[21], got)
	}

	write := []byte{0x03, 0x00, 0x00, 0x25, 0x02, 0xF0, 0x80, 0x32, 0x01, 0x00, 0x00, 0x05, 0x00, 0x00, 0x0E, 0x00, 0x06, 0x05, 0x01,
		0x12, 0x0A, 0x10, 0x02, 0x00, 0x02, 0x00, 0x01, 0x84, 0x00, 0x00, 0x08, 0x00, 0x04, 0x00, 0x10, 0xAA, 0xBB}
	got = exchange(t, c, write)
	if len(got) != 22 || !bytes.Equal(got[19:], []byte{0x05, 0x01, 0xFF}) {
		t.Errorf("write reply % X: want 22 bytes ending 05 01 FF", got)
	}
	if db := s.DB(1); !bytes.Equal(db, []byte{1, 0xAA, 0xBB, 4, 5, 6}) {
		t.Errorf("DB after write % X", db)
	}
	if now, peak, total := s.Conns(); now != 1 || peak != 1 || total != 1 {
		t.Errorf("connections now %d peak %d total %d", now, peak, total)
	}
}

// TestWrongSlot checks a connection request for another CPU is dropped.
func TestWrongSlot(t *testing.T) {
	s, err := Start(0, 1, 480)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cr := []byte{0x03, 0x00, 0x00, 0x16, 0x11, 0xE0, 0x00, 0x00, 0x00, 0x01, 0x00, 0xC0, 0x01, 0x0A, 0xC1, 0x02, 0x01, 0x00, 0xC2, 0x02, 0x01, 0x02}
	if _, err := c.Write(cr); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 64)); err != io.EOF {
		t.Errorf("a request for slot 2 got %d bytes, %v; want the connection closed", n, err)
	}
}
