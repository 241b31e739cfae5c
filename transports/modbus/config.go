package modbus

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// The device kinds this package registers.
const (
	KindTCP = "modbus_tcp"
	KindRTU = "modbus_rtu"
)

// Defaults of the Modbus keys; docs/configuration.md lists them from
// the kinds' Defaults.
const (
	// DefaultPort is the Modbus TCP port of an address that names none.
	DefaultPort      = "502"
	DefaultUnitID    = 1
	DefaultByteOrder = ABCD
	DefaultRegister  = string(holding)
	DefaultBaudRate  = 19200
	DefaultDataBits  = 8
	DefaultParity    = "E"
	DefaultStopBits  = 1
)

// Config holds the keys a modbus_tcp device has beyond those of every
// device; routes decodes them strictly into the device's Settings.
type Config struct {
	// UnitID is the Modbus unit (slave) id.
	UnitID *int `yaml:"unit_id"`
	// ByteOrder is the device default: ABCD, DCBA, BADC or CDAB.
	ByteOrder string `yaml:"byte_order"`
	// MergeRequests joins adjacent registers into one request.
	MergeRequests *bool `yaml:"merge_requests"`
}

// RTUConfig holds the keys a modbus_rtu device has beyond those of every
// device: those of a modbus_tcp device and its serial line.
type RTUConfig struct {
	Config `yaml:",inline"`
	// Serial is the serial line of a modbus_rtu device.
	Serial Serial `yaml:"serial"`
}

// Serial is the serial line of a Modbus RTU device.
type Serial struct {
	// BaudRate in bits per second.
	BaudRate int `yaml:"baud_rate"`
	// DataBits per character.
	DataBits int `yaml:"data_bits"`
	// Parity is N (none), E (even) or O (odd).
	Parity string `yaml:"parity"`
	// StopBits is 1 or 2.
	StopBits int `yaml:"stop_bits"`
}

// GroupConfig holds the keys a Modbus poll group has beyond those of every
// group; routes decodes them strictly into the group's Settings.
type GroupConfig struct {
	// UnitID is the unit (slave) id of the group's requests, for a Modbus
	// TCP gateway or an RS-485 line with several units behind the
	// device's one endpoint and connection. Default: the device's unit_id.
	UnitID *int `yaml:"unit_id"`
}

// TagConfig holds the keys a Modbus tag has beyond those of every tag;
// routes decodes them strictly into the tag's Settings.
type TagConfig struct {
	// Register is holding (default), input, coil or discrete (Modbus only).
	Register string `yaml:"register"`
	// ByteOrder overrides the device's byte_order for this tag.
	ByteOrder string `yaml:"byte_order"`
	// Bit selects one bit (0..15) of a register for a bool tag.
	Bit *int `yaml:"bit"`
}

func init() {
	for _, k := range []routes.DeviceKind{
		{Name: KindTCP, Settings: func() any { return &Config{} }, Endpoint: tcpEndpoint,
			Doc: "A Modbus TCP server: `address` is host:port (port " + DefaultPort + " when omitted)."},
		{Name: KindRTU, Settings: func() any { return &RTUConfig{} }, Endpoint: rtuEndpoint,
			Doc: "A Modbus RTU line: `address` is the serial device path."},
	} {
		k.GroupSettings = func() any { return &GroupConfig{} }
		k.TagSettings = func() any { return &TagConfig{} }
		k.Defaults, k.Check, k.CheckTag = defaults, checkDevice, checkTag
		transports.RegisterDevice(k, errs, New)
	}
}

// settings is the device's configuration; a Device built in code may
// carry none, which means every default. A modbus_tcp device's is
// returned with a zero serial line.
func settings(dev *routes.Device) (*RTUConfig, error) {
	switch s := dev.Settings.(type) {
	case nil:
		return &RTUConfig{}, nil
	case *Config:
		return &RTUConfig{Config: *s}, nil
	case *RTUConfig:
		return s, nil
	}
	return nil, fmt.Errorf("settings are %T, want *modbus.Config or *modbus.RTUConfig", dev.Settings)
}

// unitAndOrder are the device's unit id and byte order, defaults for
// those unset, as the transport uses them.
func (c *Config) unitAndOrder() (byte, ByteOrder, error) {
	unit, order := DefaultUnitID, DefaultByteOrder
	if c.UnitID != nil {
		unit = *c.UnitID
	}
	if err := checkUnit(unit); err != nil {
		return 0, "", err
	}
	if c.ByteOrder != "" {
		o, ok := parseOrder(c.ByteOrder)
		if !ok {
			return 0, "", errOrder(c.ByteOrder)
		}
		order = o
	}
	return byte(unit), order, nil
}

// groupUnits are the unit ids of the device's poll groups' requests.
func groupUnits(dev *routes.Device, device byte) (map[*routes.PollGroup]byte, error) {
	units := map[*routes.PollGroup]byte{}
	for _, pg := range dev.Groups {
		if pg == nil {
			continue
		}
		u, err := groupUnit(pg, device)
		if err != nil {
			return nil, fmt.Errorf("group %q: %w", pg.Name, err)
		}
		units[pg] = u
	}
	return units, nil
}

// groupUnit is the unit id of a poll group's requests: its own unit_id,
// or the device's.
func groupUnit(pg *routes.PollGroup, device byte) (byte, error) {
	s, err := routes.SettingsOf[GroupConfig](pg.Settings)
	if err != nil || s.UnitID == nil {
		return device, err
	}
	if err := checkUnit(*s.UnitID); err != nil {
		return 0, err
	}
	return byte(*s.UnitID), nil
}

// withDefaults fills the serial line's unset fields.
func (s Serial) withDefaults() Serial {
	for _, f := range []struct {
		v   *int
		def int
	}{{&s.BaudRate, DefaultBaudRate}, {&s.DataBits, DefaultDataBits}, {&s.StopBits, DefaultStopBits}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if s.Parity == "" {
		s.Parity = DefaultParity
	}
	return s
}

// defaults fills the device's and its tags' unset keys; routes has given
// them their settings structs.
func defaults(_ *routes.Config, _ string, d *routes.Device) {
	var c *Config
	switch s := d.Settings.(type) {
	case *Config:
		c = s
	case *RTUConfig:
		c, s.Serial = &s.Config, s.Serial.withDefaults()
	default:
		return
	}
	if c.UnitID == nil {
		u := DefaultUnitID
		c.UnitID = &u
	}
	if c.ByteOrder == "" {
		c.ByteOrder = string(DefaultByteOrder)
	}
	if c.MergeRequests == nil {
		t := true
		c.MergeRequests = &t
	}
	for _, g := range d.Groups {
		if g == nil {
			continue
		}
		for _, t := range g.Tags {
			if t == nil {
				continue
			}
			if s, ok := t.Settings.(*TagConfig); ok && s.Register == "" {
				s.Register = DefaultRegister
			}
		}
	}
}

// checkUnit is the rule for unit_id, for the configuration and for a
// transport built in code.
func checkUnit(u int) error {
	if u < 0 || u > 255 {
		return fmt.Errorf("unit_id %d: want 0..255", u)
	}
	return nil
}

// orderRule is the problem of a byte_order that parseOrder refuses.
const orderRule = "byte_order %q: want ABCD, DCBA, BADC or CDAB"

// errOrder is orderRule for the transport.
func errOrder(s string) error { return fmt.Errorf(orderRule, s) }

func checkDevice(c *routes.Config, path string, d *routes.Device) routes.Errors {
	// A serial path is refused only when empty, which the common rules
	// report.
	errs := c.CheckAddress(path, d)
	// ErrorAtf clips a written value, perhaps megabytes long, and keeps
	// the rule after it.
	add := func(p, format string, args ...any) { errs = append(errs, c.ErrorAtf(p, format, args...)) }
	s, err := settings(d)
	if err != nil {
		add(path, "%v", err)
		return errs
	}
	if u := s.UnitID; u != nil {
		if err := checkUnit(*u); err != nil {
			add(path+".unit_id", "%v", err)
		}
	}
	if _, ok := parseOrder(s.ByteOrder); !ok {
		add(path+".byte_order", orderRule, s.ByteOrder)
	}
	if p := s.Serial.Parity; d.Kind == KindRTU && !slices.Contains([]string{"N", "E", "O"}, p) {
		add(path+".serial.parity", "parity %q: want N, E or O", p)
	}
	for i, g := range d.Groups {
		if g == nil {
			continue
		}
		if _, err := groupUnit(g, 0); err != nil {
			add(fmt.Sprintf("%s.groups[%d].unit_id", path, i), "%v", err)
		}
	}
	return errs
}

// checkTag applies the Modbus rules to a tag, reading its address with
// the parser the transport uses.
func checkTag(c *routes.Config, path string, _ *routes.Device, t *routes.Tag) routes.Errors {
	var errs routes.Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.ErrorAtf(p, format, args...)) }
	s, err := routes.SettingsOf[TagConfig](t.Settings)
	if err != nil {
		add(path, "%v", err)
		return errs
	}
	if _, err := parseAddress(t.Address); t.Address != "" && err != nil {
		add(path+".address", "address %q: want a 0-based register number 0..65535, decimal (\"100\") or hex (\"0x64\")", t.Address)
	}
	tb, ok := parseRegister(s.Register)
	if !ok {
		add(path+".register", "register %q: want holding, input, coil or discrete", s.Register)
	}
	if tb.isBits() && t.Type != "bool" {
		add(path+".type", "a %s register holds one bit: type must be bool", string(tb))
	}
	if t.Type == "bool" && !tb.isBits() && s.Bit == nil {
		add(path+".bit", "a bool in a %s register needs bit (0..15)", string(tb))
	}
	if s.Bit != nil && (*s.Bit < 0 || *s.Bit > 15) {
		add(path+".bit", "bit %d: want 0..15", *s.Bit)
	}
	if _, ok := parseOrder(s.ByteOrder); s.ByteOrder != "" && !ok {
		add(path+".byte_order", orderRule, s.ByteOrder)
	}
	if t.Writable && (tb == input || tb == discrete) {
		add(path+".writable", "%s registers are read-only in Modbus", string(tb))
	}
	return errs
}

// parseAddress reads a Modbus tag's 0-based protocol address: decimal, or
// hexadecimal with a 0x prefix. Leading zeros stay decimal ("0100" is 100,
// not octal 64).
func parseAddress(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	base := 10
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s, base = s[2:], 16
	}
	v, err := strconv.ParseUint(s, base, 16)
	return uint16(v), err
}

// parseRegister reads a tag's register, empty meaning holding; an
// unknown one is returned as written, with false.
func parseRegister(s string) (table, bool) {
	switch tb := table(s); tb {
	case "":
		return holding, true
	case holding, input, coil, discrete:
		return tb, true
	default:
		return tb, false
	}
}

// tcpEndpoint is host:port: every unit behind one TCP server shares its
// connection budget, so unit_id is not part of the identity.
func tcpEndpoint(d *routes.Device) (routes.Endpoint, error) {
	host, port, local, err := routes.HostPort(d.Address, DefaultPort)
	if err != nil {
		return routes.Endpoint{}, err
	}
	return routes.Endpoint{ID: KindTCP + "://" + net.JoinHostPort(host, port), NodeLocal: local}, nil
}

// rtuEndpoint is the serial port: one master per line, so two units on
// one line are one endpoint.
func rtuEndpoint(d *routes.Device) (routes.Endpoint, error) {
	if d.Address == "" {
		return routes.Endpoint{}, fmt.Errorf("modbus: address: want a serial device path such as /dev/ttyUSB0")
	}
	return routes.Endpoint{ID: KindRTU + ":" + filepath.Clean(d.Address), NodeLocal: true}, nil
}
