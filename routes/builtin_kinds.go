package routes

import (
	"slices"
	"strings"
)

// The kinds whose keys still live in Device register here; s7 and opcua
// register from their transport packages with settings of their own, as
// a new kind does.
func init() {
	modbusKeys := []string{"unit_id", "byte_order", "merge_requests"}
	modbusTags := []string{"register", "byte_order", "bit"}
	RegisterKind(DeviceKind{Name: KindModbusTCP, Keys: modbusKeys, TagKeys: modbusTags,
		Defaults: modbusDefaults, Check: checkModbusTCP, CheckTag: checkModbusTag, Endpoint: modbusTCPEndpoint,
		Doc: "A Modbus TCP server: `address` is host:port (port " + DefaultModbusPort + " when omitted)."})
	RegisterKind(DeviceKind{Name: KindModbusRTU, Keys: append(slices.Clone(modbusKeys), "serial"), TagKeys: modbusTags,
		Defaults: modbusDefaults, Check: checkModbusRTU, CheckTag: checkModbusTag, Endpoint: modbusRTUEndpoint,
		Doc: "A Modbus RTU line: `address` is the serial device path."})
}

func modbusDefaults(_ *Config, _ string, d *Device) {
	if d.UnitID == nil {
		u := DefaultUnitID
		d.UnitID = &u
	}
	setStr(&d.ByteOrder, DefaultByteOrder)
	if d.MergeRequests == nil {
		t := true
		d.MergeRequests = &t
	}
	if d.Kind == KindModbusRTU {
		setInt(&d.Serial.BaudRate, DefaultBaudRate)
		setInt(&d.Serial.DataBits, DefaultDataBits)
		setStr(&d.Serial.Parity, DefaultParity)
		setInt(&d.Serial.StopBits, DefaultStopBits)
	}
	for _, g := range d.Groups {
		if g == nil {
			continue
		}
		for _, t := range g.Tags {
			if t != nil {
				setStr(&t.Register, DefaultRegister)
			}
		}
	}
}

func checkModbus(c *Config, path string, d *Device) Errors {
	var errs Errors
	if u := d.UnitID; u != nil && (*u < 0 || *u > 255) {
		errs = append(errs, c.errAt(path+".unit_id", "unit_id %d: want 0..255", *u))
	}
	if !slices.Contains(byteOrders, d.ByteOrder) {
		errs = append(errs, c.errAt(path+".byte_order", "byte_order %q: want ABCD, DCBA, BADC or CDAB", d.ByteOrder))
	}
	return errs
}

func checkModbusTCP(c *Config, path string, d *Device) Errors {
	return append(c.checkNetAddress(path, d), checkModbus(c, path, d)...)
}

// checkNetAddress checks a host:port address through the kind's endpoint.
func (c *Config) checkNetAddress(path string, d *Device) Errors {
	if _, err := d.Endpoint(); d.Address != "" && err != nil {
		return Errors{c.errAt(path+".address", "%s", strings.TrimPrefix(err.Error(), "routes: "))}
	}
	return nil
}

func checkModbusRTU(c *Config, path string, d *Device) Errors {
	errs := checkModbus(c, path, d)
	if !slices.Contains([]string{"N", "E", "O"}, d.Serial.Parity) {
		errs = append(errs, c.errAt(path+".serial.parity", "parity %q: want N, E or O", d.Serial.Parity))
	}
	return errs
}

func checkModbusTag(c *Config, path string, _ *Device, t *Tag) Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if _, err := ModbusAddress(t.Address); t.Address != "" && err != nil {
		add(path+".address", "address %q: want a 0-based register number 0..65535, decimal (\"100\") or hex (\"0x64\")", t.Address)
	}
	if !slices.Contains(registers, t.Register) {
		add(path+".register", "register %q: want holding, input, coil or discrete", t.Register)
	}
	bitReg := t.Register == "coil" || t.Register == "discrete"
	if bitReg && t.Type != "bool" {
		add(path+".type", "a %s register holds one bit: type must be bool", t.Register)
	}
	if t.Type == "bool" && !bitReg && t.Bit == nil {
		add(path+".bit", "a bool in a %s register needs bit (0..15)", t.Register)
	}
	if t.Bit != nil && (*t.Bit < 0 || *t.Bit > 15) {
		add(path+".bit", "bit %d: want 0..15", *t.Bit)
	}
	if t.ByteOrder != "" && !slices.Contains(byteOrders, t.ByteOrder) {
		add(path+".byte_order", "byte_order %q: want ABCD, DCBA, BADC or CDAB", t.ByteOrder)
	}
	if t.Writable && (t.Register == "input" || t.Register == "discrete") {
		add(path+".writable", "%s registers are read-only in Modbus", t.Register)
	}
	return errs
}
