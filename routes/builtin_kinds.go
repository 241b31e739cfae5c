package routes

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/leasebridge/leasebridge/internal/redact"
)

// The kind whose keys still live in Device registers here; s7 and the
// Modbus kinds register from their transport packages with settings of
// their own, as a new kind does.
func init() {
	RegisterKind(DeviceKind{Name: KindOPCUA, Subscribe: true,
		Keys:     []string{"security_policy", "security_mode", "cert_file", "key_file", "username", "password_file", "password_env"},
		Defaults: opcuaDefaults, Check: checkOPCUA, CheckTag: checkOPCUATag, Endpoint: opcuaEndpoint,
		Doc: "An OPC UA server: `address` is an opc.tcp:// endpoint."})
}

func opcuaDefaults(c *Config, name string, d *Device) {
	setStr(&d.SecurityPolicy, "None")
	if d.SecurityPolicy == "None" {
		setStr(&d.SecurityMode, "None")
	}
	setStr(&d.SecurityMode, "SignAndEncrypt")
	setStr(&d.CertFile, filepath.Join(c.DataDir, "opcua", name+"-cert.pem"))
	setStr(&d.KeyFile, filepath.Join(c.DataDir, "opcua", name+"-key.pem"))
}

func checkOPCUA(c *Config, path string, d *Device) Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if d.Address != "" && !strings.HasPrefix(d.Address, "opc.tcp://") {
		add(path+".address", "address %q: want an endpoint such as opc.tcp://host:4840", redact.URL(d.Address))
	}
	if !slices.Contains([]string{"None", "Basic256Sha256"}, d.SecurityPolicy) {
		add(path+".security_policy", "security_policy %q: want None or Basic256Sha256", d.SecurityPolicy)
	}
	if !slices.Contains([]string{"None", "Sign", "SignAndEncrypt"}, d.SecurityMode) {
		add(path+".security_mode", "security_mode %q: want None, Sign or SignAndEncrypt", d.SecurityMode)
	}
	if (d.SecurityPolicy == "None") != (d.SecurityMode == "None") {
		add(path+".security_mode", "security_policy %s with security_mode %s: None goes with None", d.SecurityPolicy, d.SecurityMode)
	}
	return append(errs, c.checkCreds(path, d.Credentials, nil)...)
}

func checkOPCUATag(c *Config, path string, _ *Device, t *Tag) Errors {
	if t.Address != "" && !opcuaNodeID.MatchString(t.Address) {
		return Errors{c.errAt(path+".address", "address %q: want a node id such as ns=2;s=Temperature or i=2258", t.Address)}
	}
	return nil
}
