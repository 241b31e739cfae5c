package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrBelowEphemeralRange checks that Addr's ports can be bound and,
// where the kernel's range is readable, lie below it.
func TestAddrBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if low > lowest+1000 && (port < lowest || port >= low) {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("bind %s: %v", addr, err)
		}
		l.Close()
	}
}
