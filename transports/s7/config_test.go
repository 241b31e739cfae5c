package s7

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/transporttest"
	// The opcua kind, whose keys an s7 device refuses by name.
	_ "github.com/leasebridge/leasebridge/transports/opcua"
)

// cfgBase has one broker; each test adds its devices and routes.
const cfgBase = transporttest.ConfigHead

const cfgRoute = `routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`

func TestConfigDecodesRackAndSlot(t *testing.T) {
	cfg, err := routes.Parse("cfg.yaml", []byte(cfgBase+"  plc: {kind: s7, address: 10.0.0.1, rack: 1, slot: 2}\n"+cfgRoute))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Devices["plc"]
	if s, ok := d.Settings.(*Config); !ok || s.Rack != 1 || s.Slot != 2 {
		t.Fatalf("settings %#v, want rack 1 slot 2", d.Settings)
	}
	tr, err := New("plc", d)
	if err != nil || tr.address != "10.0.0.1:102" || tr.rack != 1 || tr.slot != 2 {
		t.Fatalf("built %+v, %v", tr, err)
	}
}

// Keys of other kinds are refused on an s7 device, naming the key and
// the kinds it belongs to, at the key's position.
func TestOtherKindsKeysAreRefused(t *testing.T) {
	for _, c := range []struct{ key, value, owners string }{
		{"unit_id", "1", " modbus_rtu/modbus_tcp key"},
		{"byte_order", "ABCD", " modbus_rtu/modbus_tcp key"},
		{"merge_requests", "true", " modbus_rtu/modbus_tcp key"},
		{"serial", "{parity: N}", " modbus_rtu key"},
		{"security_policy", "None", "n opcua key"},
		{"username", "op", "n opcua key"},
	} {
		y := cfgBase + "  plc:\n    kind: s7\n    address: 10.0.0.1\n    " + c.key + ": " + c.value + "\n" + cfgRoute
		transporttest.WantConfigErrors(t, y, fmt.Sprintf("cfg.yaml:10:5: devices.plc.%s: %s is a%s, not s7", c.key, c.key, c.owners))
	}
	// A tag key of another kind, and one of this kind on another kind.
	transporttest.WantConfigErrors(t, cfgBase+"  plc: {kind: s7, address: 10.0.0.1, groups: [{name: g, tags: [{name: x, address: MW0, type: int16, register: holding}]}]}\n"+cfgRoute,
		"cfg.yaml:7:101: devices.plc.groups[0].tags[0].register: register is a modbus_rtu/modbus_tcp tag key, not s7")
	transporttest.WantConfigErrors(t, cfgBase+"  plc: {kind: modbus_tcp, address: 10.0.0.1, slot: 1}\n"+cfgRoute,
		"cfg.yaml:7:46: devices.plc.slot: slot is a s7 key, not modbus_tcp")
	// A misspelt key of the kind's own is suggested; one of another kind
	// is suggested with whose it is.
	transporttest.WantConfigErrors(t, cfgBase+"  plc: {kind: s7, address: 10.0.0.1, solt: 1}\n"+cfgRoute,
		`cfg.yaml:7:38: devices.plc.solt: unknown key "solt" (did you mean "slot"?)`)
	transporttest.WantConfigErrors(t, cfgBase+"  plc: {kind: s7, address: 10.0.0.1, securty_policy: None}\n"+cfgRoute,
		`cfg.yaml:7:38: devices.plc.securty_policy: unknown key "securty_policy" (did you mean "security_policy"? security_policy is an opcua key, not s7)`)
}

func TestConfigValidationHasPositions(t *testing.T) {
	transporttest.WantConfigErrors(t, cfgBase+`  plc:
    kind: s7
    address: "10.0.0.1:"
    rack: 9
    groups:
      - name: g
        tags:
          - {name: x, address: DB1.DBQ3, type: int16}
          - {name: y, address: DB1.DBW2, type: int32}
`+cfgRoute,
		`cfg.yaml:9:5: devices.plc.address: address "10.0.0.1:": want host, host:port or [ipv6]:port with a port 1..65535`,
		`cfg.yaml:10:5: devices.plc.rack: rack 9 slot 0: want rack 0..7 and slot 0..31`,
		`cfg.yaml:14:23: devices.plc.groups[0].tags[0].address: address "DB1.DBQ3": want DB<n>.DBX<byte>.<bit>`,
		`cfg.yaml:15:13: devices.plc.groups[0].tags[1]: type "int32" is 4 bytes but W addresses 2`,
	)
}

// A tag without a name is one problem, reported once: by the common rules,
// not again by the s7 parser.
func TestNamelessTagIsOneError(t *testing.T) {
	transporttest.WantConfigErrors(t, cfgBase+"  plc: {kind: s7, address: h, groups: [{name: g, tags: [{address: DB1.DBW0, type: int16}]}]}\n"+cfgRoute,
		`cfg.yaml:7:57: devices.plc.groups[0].tags[0]: tag has no name`)
}

// The configuration accepts exactly the addresses the transport reads.
func TestAddressForms(t *testing.T) {
	for _, c := range []struct {
		addr, typ string
		ok        bool
	}{
		{"DB1.DBX0.0", "bool", true}, {"DB1.DBB2", "uint8", true}, {"DB1.DBW10", "int16", true}, {"DB1.DBD4", "float32", true},
		{"DB1.DBS20", "string", true}, {"DB1.STRING10.20", "string", true}, {"db3.dbstring0.8", "string", true},
		{"MX5.2", "bool", true}, {"M5.2", "bool", true}, {"MW10", "int16", true}, {"IB0", "uint8", true}, {"QD4", "uint32", true}, {"E0.1", "bool", true},
		{"DB1.DBX0", "bool", false}, {"DB1.DBS20.1", "string", false}, {"DB1.DBW10.3", "int16", false}, {"MW10.1", "int16", false},
		{"DB1.DBQ3", "int16", false}, {"X1", "int16", false}, {"M5.8", "bool", false},
	} {
		addr, typ, ok := c.addr, c.typ, c.ok
		y := cfgBase + fmt.Sprintf("  plc: {kind: s7, address: 10.0.0.1, groups: [{name: g, tags: [{name: x, address: %q, type: %s, length: 8}]}]}\n", addr, typ) + cfgRoute
		if got := transporttest.ConfigErrors(t, y); (got == nil) != ok {
			t.Errorf("S7 address %q (%s): errors %q, want accepted %v", addr, typ, got, ok)
		}
	}
}

func TestEndpointIdentity(t *testing.T) {
	for _, c := range []struct {
		addr       string
		rack, slot int
		id         string
	}{
		{"10.0.0.5", 0, 1, "s7://10.0.0.5:102 rack 0 slot 1"},
		{"10.0.0.5:102", 0, 2, "s7://10.0.0.5:102 rack 0 slot 2"},
		{"Cpu.Plant:102", 1, 3, "s7://cpu.plant:102 rack 1 slot 3"},
	} {
		ep, err := (&routes.Device{Kind: Kind, Address: c.addr, Settings: &Config{Rack: c.rack, Slot: c.slot}}).Endpoint()
		if err != nil || ep.ID != c.id || ep.NodeLocal {
			t.Errorf("%q rack %d slot %d: %+v, %v; want %q", c.addr, c.rack, c.slot, ep, err, c.id)
		}
	}
}

// Two entries for one CPU are two clients of one device; another slot is
// another CPU.
func TestOneCPUTwiceIsRefused(t *testing.T) {
	dev := func(name, addr string, slot int) string {
		return fmt.Sprintf("  %s: {kind: s7, address: %q, slot: %d, groups: [{name: g, tags: [{name: t, address: DB1.DBW0, type: int16}]}]}\n", name, addr, slot)
	}
	routesOf := "routes:\n  - {name: ra, session: sa, kind: poll, device: a, broker: local}\n  - {name: rb, session: sb, kind: poll, device: b, broker: local}\n"
	refusals := func(y string) string {
		cfg, err := routes.Parse("cfg.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		reports, errs := preflight.Admit(cfg, false)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		var out []string
		for _, r := range reports {
			out = append(out, r.Refusals...)
		}
		return strings.Join(out, "\n")
	}
	if got := refusals(cfgBase + dev("a", "10.0.0.6", 1) + dev("b", "10.0.0.6:102", 1) + routesOf); !strings.Contains(got, "s7://10.0.0.6:102 rack 0 slot 1") {
		t.Errorf("one CPU twice: refusals %q, want the endpoint named", got)
	}
	if got := refusals(cfgBase + dev("a", "10.0.0.6", 2) + dev("b", "10.0.0.6:102", 3) + routesOf); got != "" {
		t.Errorf("two slots: refused %q", got)
	}
}

// A tag address megabytes long is clipped in its error; the rule after it
// stays (routes.Config.ErrorAtf).
func TestHugeAddressKeepsTheRule(t *testing.T) {
	huge := strings.Repeat("9", 1<<20)
	got := transporttest.ConfigErrors(t, cfgBase+"  plc: {kind: s7, address: h, groups: [{name: g, tags: [{name: x, address: \""+huge+"\", type: int16}]}]}\n"+cfgRoute)
	all := strings.Join(got, "\n")
	if len(got) != 1 || len(all) > 4096 || !strings.Contains(all, `...(1048576 bytes)": want DB<n>.DBX<byte>.<bit>`) {
		t.Errorf("huge address: %.600q", got)
	}
}
