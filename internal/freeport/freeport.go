// Package freeport picks loopback ports for test processes that must be
// told their address before they bind it (a bridge's http_listen, an etcd
// member's URLs in an initial cluster).
//
// A port the kernel hands out for port 0 comes from its ephemeral range,
// the same range it draws the source port of every outgoing connection
// from: on a busy test machine one of those connections can take the port
// between the pick and the bind, and the process then fails with "address
// already in use". Addr picks below the ephemeral range instead, where
// the kernel never assigns a port by itself.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port Addr considers.
const lowest = 20000

// ErrNone reports that no free port was found below the ephemeral range.
var ErrNone = errors.New("freeport: no free loopback port below the ephemeral range")

// Addr returns a loopback host:port that was free a moment ago, below the
// kernel's ephemeral port range (or from the kernel when that range cannot
// be read or leaves no room).
func Addr() (string, error) {
	hi := ephemeralLow() - 1
	if hi-lowest < 1000 {
		return kernelAddr()
	}
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lowest+rand.IntN(hi-lowest+1)))
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
			return addr, nil
		}
	}
	return "", ErrNone
}

// kernelAddr is a port the kernel chose, for machines without the range.
func kernelAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("freeport: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, 0 when
// it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
