package modbus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/transporttest"
	// s7 is another registered kind whose keys a Modbus device refuses.
	_ "github.com/leasebridge/leasebridge/transports/s7"
)

// cfgBase has one broker; each test adds its devices and routes.
const cfgBase = transporttest.ConfigHead

const cfgRoute = `routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`

var parseErrors, wantOnly = transporttest.ConfigErrors, transporttest.WantConfigErrors

// The device's and the tags' keys decode into the kind's settings, with
// defaults for the rest, and the transport is built from them.
func TestConfigDecodesDeviceAndTagKeys(t *testing.T) {
	cfg, err := routes.Parse("cfg.yaml", []byte(cfgBase+`  plc:
    kind: modbus_rtu
    address: /dev/ttyUSB0
    unit_id: 7
    byte_order: CDAB
    merge_requests: false
    serial: {baud_rate: 9600, parity: N}
    groups:
      - name: g
        tags:
          - {name: a, address: "0x10", register: input, type: int32, byte_order: ABCD}
          - {name: b, address: 4, type: bool, bit: 3}
`+cfgRoute))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Devices["plc"]
	s, ok := d.Settings.(*RTUConfig)
	if !ok || *s.UnitID != 7 || s.ByteOrder != "CDAB" || *s.MergeRequests ||
		s.Serial != (Serial{BaudRate: 9600, DataBits: DefaultDataBits, Parity: "N", StopBits: DefaultStopBits}) {
		t.Fatalf("device settings %#v", d.Settings)
	}
	tags := d.Groups[0].Tags
	a, aok := tags[0].Settings.(*TagConfig)
	b, bok := tags[1].Settings.(*TagConfig)
	if !aok || !bok || *a != (TagConfig{Register: "input", ByteOrder: "ABCD"}) || b.Register != DefaultRegister || b.Bit == nil || *b.Bit != 3 {
		t.Fatalf("tag settings %#v %#v", tags[0].Settings, tags[1].Settings)
	}
	tr, err := New("plc", d)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := tr.Group("g")
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := g.tags[0], g.tags[1]
	if tr.unit != 7 || tr.merge || tr.serial.BaudRate != 9600 || tr.serial.Parity != "N" ||
		ta.table != input || ta.start != 16 || ta.order != ABCD || tb.table != holding || tb.bit != 3 || tb.order != CDAB {
		t.Fatalf("built unit %d merge %v serial %+v, tags %+v %+v", tr.unit, tr.merge, tr.serial, ta, tb)
	}
}

// Keys of another kind are refused on a Modbus device and tag, naming the
// kinds they belong to; misspelt ones get a did-you-mean.
func TestOtherKindsKeysAreRefused(t *testing.T) {
	dev := func(kind, extra, tagExtra string) string {
		return cfgBase + fmt.Sprintf("  plc:\n    kind: %s\n    address: 10.0.0.1\n%s    groups: [{name: g, tags: [{name: x, address: 1, type: int16%s}]}]\n", kind, extra, tagExtra) + cfgRoute
	}
	wantOnly(t, dev(KindTCP, "    serial: {parity: N}\n", ""),
		"cfg.yaml:10:5: devices.plc.serial: serial is a modbus_rtu key, not modbus_tcp")
	wantOnly(t, dev(KindTCP, "    rack: 1\n", ""),
		"cfg.yaml:10:5: devices.plc.rack: rack is a s7 key, not modbus_tcp")
	wantOnly(t, dev(KindRTU, "    unit_di: 2\n", ""),
		`cfg.yaml:10:5: devices.plc.unit_di: unknown key "unit_di" (did you mean "unit_id"?)`)
	wantOnly(t, dev(KindTCP, "", ", registr: coil"),
		`cfg.yaml:10:66: devices.plc.groups[0].tags[0].registr: unknown key "registr" (did you mean "register"?)`)
	wantOnly(t, dev(KindTCP, "", ", rack: 1"),
		`cfg.yaml:10:66: devices.plc.groups[0].tags[0].rack: unknown key "rack"`)
	// A misspelt kind is the one error: the keys of the kind meant are
	// not reported too.
	wantOnly(t, dev("modbus_tpc", "    unit_id: 2\n", ", register: coil"),
		`cfg.yaml:8:5: devices.plc.kind: unknown device kind "modbus_tpc"`)
	// The kind may be written after the tags.
	wantOnly(t, cfgBase+"  plc: {groups: [{name: g, tags: [{name: x, address: 1, type: int16, bits: 3}]}], address: 10.0.0.1, kind: modbus_tcp}\n"+cfgRoute,
		`cfg.yaml:7:70: devices.plc.groups[0].tags[0].bits: unknown key "bits" (did you mean "bit"?)`)
}

func TestConfigValidationHasPositions(t *testing.T) {
	wantOnly(t, cfgBase+`  plc:
    kind: modbus_rtu
    address: /dev/ttyS0
    unit_id: 300
    byte_order: abcd
    serial: {parity: X}
    groups:
      - name: g
        tags:
          - {name: x, address: 1, type: int16, register: memory}
`+cfgRoute,
		`cfg.yaml:10:5: devices.plc.unit_id: unit_id 300: want 0..255`,
		`cfg.yaml:11:5: devices.plc.byte_order: byte_order "abcd": want ABCD, DCBA, BADC or CDAB`,
		`cfg.yaml:12:14: devices.plc.serial.parity: parity "X": want N, E or O`,
		`cfg.yaml:16:48: devices.plc.groups[0].tags[0].register: register "memory": want holding, input, coil or discrete`,
	)
	wantOnly(t, cfgBase+"  plc: {kind: modbus_tcp, address: \"10.0.0.1:\"}\n"+cfgRoute,
		`cfg.yaml:7:27: devices.plc.address: address "10.0.0.1:": want host, host:port or [ipv6]:port with a port 1..65535`)
}

// The configuration accepts exactly the tag addresses the transport reads:
// both use parseAddress.
func TestAddressForms(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"0", true}, {"65535", true}, {"0x64", true}, {"0XFFFF", true}, {"0100", true}, {" 7 ", true},
		{"65536", false}, {"0x10000", false}, {"-1", false}, {"1e3", false}, {"40001x", false}, {"0o17", false},
	} {
		y := cfgBase + fmt.Sprintf("  plc: {kind: modbus_tcp, address: 10.0.0.1, groups: [{name: g, tags: [{name: x, address: %q, type: int16}]}]}\n", c.addr) + cfgRoute
		cfgOK := parseErrors(t, y) == nil
		_, err := New("plc", &routes.Device{Kind: KindTCP, Address: "10.0.0.1",
			Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: c.addr, Type: "int16"}}}}})
		if cfgOK != c.ok || (err == nil) != c.ok {
			t.Errorf("address %q: configuration accepts %v, transport error %v; want accepted %v", c.addr, cfgOK, err, c.ok)
		}
	}
}

// Settings of another kind are refused by the transport, naming the type.
func TestForeignSettingsAreRefused(t *testing.T) {
	type other struct{}
	_, err := New("plc", &routes.Device{Kind: KindTCP, Address: "10.0.0.1", Settings: &other{}})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "modbus.other") {
		t.Errorf("device settings of another kind: %v", err)
	}
	_, err = New("plc", &routes.Device{Kind: KindTCP, Address: "10.0.0.1",
		Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "1", Settings: &other{}}}}}})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("tag settings of another kind: %v", err)
	}
}

// A group's unit_id decodes into its GroupConfig and is checked with its
// position; it is a key of the Modbus kinds' groups only.
func TestGroupUnitID(t *testing.T) {
	cfg, err := routes.Parse("cfg.yaml", []byte(cfgBase+`  plc:
    kind: modbus_tcp
    address: 10.0.0.1
    groups:
      - {name: a, tags: [{name: x, address: 1, type: int16}]}
      - {name: b, unit_id: 2, tags: [{name: y, address: 1, type: int16}]}
`+cfgRoute))
	if err != nil {
		t.Fatal(err)
	}
	gs := cfg.Devices["plc"].Groups
	a, aok := gs[0].Settings.(*GroupConfig)
	b, bok := gs[1].Settings.(*GroupConfig)
	if !aok || !bok || a.UnitID != nil || b.UnitID == nil || *b.UnitID != 2 {
		t.Fatalf("group settings %#v %#v", gs[0].Settings, gs[1].Settings)
	}
	wantOnly(t, cfgBase+"  plc: {kind: modbus_rtu, address: /dev/ttyS0, groups: [{name: g, unit_id: 256, tags: [{name: x, address: 1, type: int16}]}]}\n"+cfgRoute,
		`cfg.yaml:7:67: devices.plc.groups[0].unit_id: unit_id 256: want 0..255`)
	wantOnly(t, cfgBase+"  plc: {kind: s7, address: 10.0.0.1, groups: [{name: g, unit_id: 2, tags: [{name: x, address: DB1.DBW0, type: int16}]}]}\n"+cfgRoute,
		`cfg.yaml:7:57: devices.plc.groups[0].unit_id: unit_id is a modbus_rtu/modbus_tcp group key, not s7`)
	wantOnly(t, cfgBase+"  plc: {kind: modbus_tcp, address: 10.0.0.1, groups: [{name: g, unitid: 2, tags: [{name: x, address: 1, type: int16}]}]}\n"+cfgRoute,
		`cfg.yaml:7:65: devices.plc.groups[0].unitid: unknown key "unitid" (did you mean "unit_id"?)`)
}

// A written value megabytes long is clipped in its error; the rule after
// it stays (routes.Config.ErrorAtf).
func TestHugeValuesKeepTheRule(t *testing.T) {
	huge := strings.Repeat("9", 1<<20)
	got := parseErrors(t, cfgBase+"  plc: {kind: modbus_tcp, address: h, byte_order: X"+huge+
		", groups: [{name: g, tags: [{name: x, address: \""+huge+"\", type: int16, register: r"+huge+"}]}]}\n"+cfgRoute)
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`...(1048577 bytes)": want ABCD, DCBA, BADC or CDAB`,
		`...(1048576 bytes)": want a 0-based register number 0..65535`,
		`...(1048577 bytes)": want holding, input, coil or discrete`,
	} {
		if len(got) != 3 || len(all) > 4096 || !strings.Contains(all, want) {
			t.Errorf("huge values: %.600q, want %q", got, want)
		}
	}
}
