package s7

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Kind is the device kind this package registers.
const Kind = "s7"

// DefaultPort is the ISO-on-TCP port of an address that names none.
const DefaultPort = "102"

// Config holds the keys an s7 device has beyond those of every device;
// routes decodes them strictly into the device's Settings.
type Config struct {
	// Rack of the S7 CPU, 0..7.
	Rack int `yaml:"rack"`
	// Slot of the S7 CPU, 0..31: a rack/slot pair selects one CPU behind
	// the address, so it is part of the device's endpoint.
	Slot int `yaml:"slot"`
}

func init() {
	transports.RegisterDevice(routes.DeviceKind{
		Name:     Kind,
		Settings: func() any { return &Config{} },
		Check:    checkDevice,
		CheckTag: checkTag,
		WholeTag: true,
		Endpoint: endpoint,
		Doc:      "A Siemens S7 PLC over ISO-on-TCP: `address` is host:port (port " + DefaultPort + " when omitted); tag addresses are TIA addresses such as DB1.DBW10.",
	}, errs, New)
}

// settings is the device's Config; a Device built in code may carry none,
// which means rack 0, slot 0.
func settings(dev *routes.Device) (*Config, error) { return routes.SettingsOf[Config](dev.Settings) }

// checkRackSlot is the rule for rack and slot, for the configuration and
// for a transport built in code.
func checkRackSlot(c *Config) error {
	if c.Rack < 0 || c.Rack > 7 || c.Slot < 0 || c.Slot > 31 {
		return fmt.Errorf("rack %d slot %d: want rack 0..7 and slot 0..31", c.Rack, c.Slot)
	}
	return nil
}

// dialAddress is host:port, a bare host taking DefaultPort.
func dialAddress(addr string) (string, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if addr == "" || strings.Contains(addr, ":") {
			return "", fmt.Errorf("address %q: want host or host:port: %v", addr, err)
		}
		return net.JoinHostPort(addr, DefaultPort), nil
	}
	return addr, nil
}

func checkDevice(c *routes.Config, path string, d *routes.Device) routes.Errors {
	errs := c.CheckAddress(path, d)
	if s, err := settings(d); err != nil {
		errs = append(errs, c.ErrorAt(path, err.Error()))
	} else if err := checkRackSlot(s); err != nil {
		at := path + ".slot"
		if s.Rack < 0 || s.Rack > 7 {
			at = path + ".rack"
		}
		errs = append(errs, c.ErrorAt(at, err.Error()))
	}
	return errs
}

// checkTag parses the tag as the transport will, so the configuration
// refuses exactly what the transport cannot read.
func checkTag(c *routes.Config, path string, _ *routes.Device, t *routes.Tag) routes.Errors {
	if t.Address == "" {
		return nil // the common rules report it
	}
	_, err := parseTag(t)
	if err == nil {
		return nil
	}
	at := path
	if errors.Is(err, ErrAddress) {
		at += ".address"
	}
	msg := err.Error()
	for _, prefix := range []string{ErrAddress.Error() + ": ", ErrConfig.Error() + ": ", fmt.Sprintf("tag %q: ", t.Name)} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	// The address as an argument of ErrorAtf: one megabytes long is
	// clipped and the rule after it stays.
	if rule, ok := strings.CutPrefix(msg, "address "+strconv.Quote(t.Address)+": "); ok {
		return routes.Errors{c.ErrorAtf(at, "address %q: %s", t.Address, rule)}
	}
	return routes.Errors{c.ErrorAt(at, msg)}
}

// endpoint is host:port, rack and slot: a rack/slot pair selects one CPU
// behind the address (several CPUs of an S7-400 share a CP's address), so
// another rack or slot is another device.
func endpoint(d *routes.Device) (routes.Endpoint, error) {
	host, port, local, err := routes.HostPort(d.Address, DefaultPort)
	if err != nil {
		return routes.Endpoint{}, err
	}
	s, err := settings(d)
	if err != nil {
		return routes.Endpoint{}, err
	}
	return routes.Endpoint{ID: fmt.Sprintf("s7://%s rack %d slot %d", net.JoinHostPort(host, port), s.Rack, s.Slot), NodeLocal: local}, nil
}
