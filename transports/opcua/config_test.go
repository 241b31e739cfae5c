package opcua

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/transporttest"
	// The Modbus kinds, whose keys an opcua device refuses by name.
	_ "github.com/leasebridge/leasebridge/transports/modbus"
)

// cfgBase has one broker and a data_dir (line 7); each test adds its
// devices and routes.
const cfgBase = "data_dir: /srv/lb\n" + transporttest.ConfigHead

const cfgRoute = `routes:
  - {name: r, session: s, kind: poll, device: ua, broker: local}
`

// uaDevice is a device ua with one tag at addr, its keys extra.
func uaDevice(extra, addr, tagExtra string) string {
	return `  ua: {kind: opcua, address: "opc.tcp://h:4840"` + extra +
		`, groups: [{name: g, tags: [{name: x, address: "` + addr + `", type: bool` + tagExtra + "}]}]}\n"
}

func parseDevice(t *testing.T, y string) *routes.Device {
	t.Helper()
	cfg, err := routes.Parse("cfg.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Devices["ua"]
}

// The kind's keys decode into its Config with their defaults: security
// None/None, the client certificate under data_dir named after the device.
func TestConfigDecodesAndDefaults(t *testing.T) {
	d := parseDevice(t, cfgBase+uaDevice("", "ns=1;s=x", "")+cfgRoute)
	s, ok := d.Settings.(*Config)
	want := Config{SecurityPolicy: "None", SecurityMode: "None",
		CertFile: filepath.Join("/srv/lb", "opcua", "ua-cert.pem"), KeyFile: filepath.Join("/srv/lb", "opcua", "ua-key.pem")}
	if !ok || *s != want {
		t.Fatalf("settings %#v, want %#v", d.Settings, want)
	}
	if _, ok := d.Credentials(); !ok {
		t.Error("an opcua device discloses no credentials")
	}

	d = parseDevice(t, cfgBase+uaDevice(", security_policy: Basic256Sha256, cert_file: /c.pem, key_file: /k.pem, username: op, password_env: UA_PW", "ns=1;s=x", "")+cfgRoute)
	s = d.Settings.(*Config)
	want = Config{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", CertFile: "/c.pem", KeyFile: "/k.pem",
		Credentials: routes.Credentials{Username: "op", PasswordEnv: "UA_PW"}}
	if *s != want {
		t.Fatalf("settings %#v, want %#v", *s, want)
	}
	cr, ok := d.Credentials()
	if !ok || cr != want.Credentials {
		t.Errorf("credentials %+v %v, want %+v", cr, ok, want.Credentials)
	}
	tr, err := New("ua", d)
	if err != nil || tr.policy != PolicyBasic256Sha256 || tr.certFile != "/c.pem" || tr.keyFile != "/k.pem" || tr.creds.Username != "op" {
		t.Fatalf("built %+v, %v", tr, err)
	}
}

// Every rule of the kind reports the key that breaks it, with its
// position, and a password in the address never reaches the message.
func TestConfigValidationHasPositions(t *testing.T) {
	transporttest.WantConfigErrors(t, cfgBase+`  ua:
    kind: opcua
    address: "tcp://op:s3cret@h:4840"
    security_policy: Basic128Rsa15
    security_mode: Encrypt
    password_file: /pw
    password_env: PW
    groups:
      - name: g
        tags:
          - {name: x, address: DB1.DBW0, type: int16}
          - {name: y, address: "i=abc", type: int16}
`+cfgRoute,
		`cfg.yaml:8:3: devices.ua.username: a password is configured but no username`,
		`cfg.yaml:10:5: devices.ua.address: address "tcp://op:xxxxx@h:4840": want an endpoint such as opc.tcp://host:4840`,
		`cfg.yaml:11:5: devices.ua.security_policy: security_policy "Basic128Rsa15": want None or Basic256Sha256`,
		`cfg.yaml:12:5: devices.ua.security_mode: security_mode "Encrypt": want None, Sign or SignAndEncrypt`,
		`cfg.yaml:14:5: devices.ua.password_env: set password_file or password_env, not both`,
		`cfg.yaml:18:23: devices.ua.groups[0].tags[0].address: address "DB1.DBW0": want a node id such as ns=2;s=Temperature or i=2258`,
		`cfg.yaml:19:23: devices.ua.groups[0].tags[1].address: address "i=abc": want a node id such as ns=2;s=Temperature or i=2258`,
	)
	transporttest.WantConfigErrors(t, cfgBase+uaDevice(", security_mode: Sign", "ns=1;s=x", "")+cfgRoute,
		`cfg.yaml:8:50: devices.ua.security_mode: security_policy None with security_mode Sign: None goes with None`)
	// A huge value is clipped; the rule after it stays.
	huge := strings.Repeat("x", 1<<20)
	got := transporttest.ConfigErrors(t, cfgBase+uaDevice(", security_policy: "+huge, "x"+huge, "")+cfgRoute)
	all := strings.Join(got, "\n")
	if len(got) != 2 || len(all) > 4096 || !strings.Contains(all, "...(1048576 bytes)\": want None or Basic256Sha256") ||
		!strings.Contains(all, "...(1048577 bytes)\": want a node id such as ns=2;s=Temperature or i=2258") {
		t.Errorf("huge values: %.300q", got)
	}
}

// The configuration accepts exactly the node ids the transport reads.
func TestNodeIDForms(t *testing.T) {
	for addr, ok := range map[string]bool{
		"ns=2;s=Temperature": true, "i=2258": true, "ns=3;i=1001": true, "s=x": true,
		"ns=2;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63": true, "ns=2;b=aGVsbG8=": true,
		"DB1.DBW0": false, "Temperature": false, "i=abc": false, "ns=x;s=t": false, " ns=1;s=x": false, "x=1": false,
	} {
		errs := transporttest.ConfigErrors(t, cfgBase+uaDevice("", addr, "")+cfgRoute)
		tg := &routes.Tag{Name: "x", Address: addr}
		_, err := parseTag(tg)
		if (errs == nil) != ok || (err == nil) != ok {
			t.Errorf("node id %q: configuration %q, transport %v; want accepted %v by both", addr, errs, err, ok)
		}
		if !ok && !errors.Is(err, ErrAddress) {
			t.Errorf("node id %q: transport error %v is not ErrAddress", addr, err)
		}
	}
}

// Keys of other kinds are refused on an opcua device naming the kinds
// they belong to, and the kind's own keys on another kind.
func TestOtherKindsKeysAreRefused(t *testing.T) {
	transporttest.WantConfigErrors(t, cfgBase+uaDevice(", unit_id: 3", "ns=1;s=x", "")+cfgRoute,
		`cfg.yaml:8:50: devices.ua.unit_id: unit_id is a modbus_rtu/modbus_tcp key, not opcua`)
	transporttest.WantConfigErrors(t, cfgBase+uaDevice(", serial: {parity: N}", "ns=1;s=x", "")+cfgRoute,
		`cfg.yaml:8:50: devices.ua.serial: serial is a modbus_rtu key, not opcua`)
	transporttest.WantConfigErrors(t, cfgBase+uaDevice("", "ns=1;s=x", ", bit: 3")+cfgRoute,
		`cfg.yaml:8:119: devices.ua.groups[0].tags[0].bit: bit is a modbus_rtu/modbus_tcp tag key, not opcua`)
	transporttest.WantConfigErrors(t, cfgBase+uaDevice(", securty_mode: None", "ns=1;s=x", "")+cfgRoute,
		`cfg.yaml:8:50: devices.ua.securty_mode: unknown key "securty_mode" (did you mean "security_mode"?)`)
	for _, key := range []string{"security_policy: None", "cert_file: /c.pem", "username: op", "password_env: PW"} {
		name, _, _ := strings.Cut(key, ":")
		transporttest.WantConfigErrors(t, cfgBase+"  ua: {kind: modbus_tcp, address: 10.0.0.1, "+key+"}\n"+cfgRoute,
			`cfg.yaml:8:45: devices.ua.`+name+`: `+name+` is an opcua key, not modbus_tcp`)
	}
	// Only an opcua device subscribes.
	transporttest.WantConfigErrors(t, cfgBase+"  ua: {kind: modbus_tcp, address: 10.0.0.1, groups: [{name: g, mode: subscribe}]}\n"+cfgRoute,
		`cfg.yaml:8:64: devices.ua.groups[0].mode: mode subscribe is for opcua devices; modbus_tcp devices are polled`)
	if errs := transporttest.ConfigErrors(t, cfgBase+"  ua: {kind: opcua, address: \"opc.tcp://h\", groups: [{name: g, mode: subscribe, tags: [{name: x, address: i=1, type: bool}]}]}\n"+cfgRoute); errs != nil {
		t.Errorf("an opcua subscribe group: %q", errs)
	}
}

func TestEndpointIdentity(t *testing.T) {
	for _, c := range []struct {
		addr        string
		id          string
		local, fail bool
	}{
		{addr: "opc.tcp://PLC.local", id: "opc.tcp://plc.local:4840"},
		{addr: "opc.tcp://bridge:s3cret@PLC.local:4840/UA/Server/?x=1#f", id: "opc.tcp://plc.local:4840/UA/Server"},
		{addr: "opc.tcp://[::1]/UA", id: "opc.tcp://localhost:4840/UA", local: true},
		{addr: "opc.tcp://plc.local:4841", id: "opc.tcp://plc.local:4841"},
		{addr: "opc.tcp://u:s3cret@", fail: true},
		{addr: "opc.tcp://u:s3cret@h:99999", fail: true},
	} {
		ep, err := (&routes.Device{Kind: Kind, Address: c.addr}).Endpoint()
		if c.fail {
			if err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%q: endpoint %+v, err %v: want an error without the password", c.addr, ep, err)
			}
			continue
		}
		if err != nil || ep.ID != c.id || ep.NodeLocal != c.local {
			t.Errorf("%q: endpoint %+v, err %v; want %q, node-local %v", c.addr, ep, err, c.id, c.local)
		}
	}
}

// Two entries naming one server, written differently, are refused at
// admission without the password of either address.
func TestEntriesWithOneEndpointAreRefused(t *testing.T) {
	dev := func(name, addr string) string {
		return "  " + name + `: {kind: opcua, address: "` + addr + `", groups: [{name: g, tags: [{name: t, address: "ns=1;s=t", type: int16}]}]}` + "\n"
	}
	const routesAB = `routes:
  - {name: ra, session: sa, kind: poll, device: a, broker: local}
  - {name: rb, session: sb, kind: poll, device: b, broker: local}
`
	for _, c := range []struct {
		name, a, b, endpoint string
	}{
		{name: "user info", a: "opc.tcp://op:s3cret@Line3:4840/ua", b: "opc.tcp://line3/ua/", endpoint: "opc.tcp://line3:4840/ua"},
		{name: "other port", a: "opc.tcp://line3:4840", b: "opc.tcp://line3:4841"},
	} {
		cfg, err := routes.Parse("cfg.yaml", []byte(cfgBase+dev("a", c.a)+dev("b", c.b)+routesAB))
		if err != nil {
			t.Fatal(err)
		}
		reports, errs := preflight.Admit(cfg, false)
		if len(errs) > 0 {
			t.Fatalf("%s: preflight: %v", c.name, errs)
		}
		got := map[string][]string{}
		for _, r := range reports {
			got[r.Session] = r.Refusals
		}
		if c.endpoint == "" {
			if len(got["sa"])+len(got["sb"]) != 0 {
				t.Errorf("%s: distinct endpoints refused: %q", c.name, got)
			}
			continue
		}
		want := `devices "a" (cfg.yaml:8, session sa) and "b" (cfg.yaml:9, session sb) are both endpoint ` + c.endpoint + `: each entry opens its own connection`
		for _, s := range []string{"sa", "sb"} {
			if len(got[s]) != 1 || !strings.HasPrefix(got[s][0], want) || strings.Contains(got[s][0], "s3cret") {
				t.Errorf("%s: session %s refusals %q, want one starting %q, without the password", c.name, s, got[s], want)
			}
		}
	}
}
