package routes

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Endpoint is the exclusive resource a device connection occupies: two
// device entries with the same ID would be two clients of one device.
type Endpoint struct {
	// ID is the canonical identity, such as modbus_tcp://plc.local:502;
	// it never carries a user name or a password.
	ID string
	// NodeLocal is true when the identity only names a resource on the
	// machine it is read on (a serial port, a loopback address): the same
	// ID on two machines is two different devices.
	NodeLocal bool
}

// Endpoint is the device's exclusive endpoint, as its kind defines it.
// Identities are compared as strings and never resolve a name: plc.local
// and the address it resolves to are two identities.
func (d *Device) Endpoint() (Endpoint, error) {
	if k := LookupKind(d.Kind); k != nil {
		return k.Endpoint(d)
	}
	return Endpoint{}, fmt.Errorf("routes: unknown device kind %q", d.Kind)
}

// CheckAddress reports a written address of the device at path that its
// kind's Endpoint refuses, at the address key: a kind checks its address
// with the very rule that makes its endpoint identity (HostPort's for a
// host:port address).
func (c *Config) CheckAddress(path string, d *Device) Errors {
	if d.Address == "" {
		return nil // the common rules report it
	}
	if _, err := d.Endpoint(); err != nil {
		return Errors{c.errAt(path+".address", "%s", strings.TrimPrefix(err.Error(), "routes: "))}
	}
	return nil
}

// HostPort splits host[:port] and normalises it without resolving names:
// the host lowercased without a trailing dot or IPv6 brackets, an IP
// address in its canonical form, localhost, 127.0.0.1 and ::1 as one
// loopback host, and def as the port when none is written. Kinds whose
// endpoint is a network address build their identity from it.
func HostPort(addr, def string) (host, port string, loopback bool, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		// A bare host takes the default port; an IPv6 address needs
		// brackets and a port, as the transports dial it.
		if addr == "" || strings.Contains(addr, ":") {
			return "", "", false, fmt.Errorf("routes: address %q: want host, host:port or [ipv6]:port", addr)
		}
		host, port = addr, def
	}
	n, err := strconv.Atoi(port)
	if host == "" || err != nil || n < 1 || n > 65535 {
		return "", "", false, fmt.Errorf("routes: address %q: want host, host:port or [ipv6]:port with a port 1..65535", addr)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		host = ip.String()
		if ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback() {
			host = "localhost"
		}
	}
	return host, strconv.Itoa(n), host == "localhost", nil
}
