package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease/fleetca"
)

// `store roles` turns authentication on with the file's bridge
// certificate, is refused to that certificate once it is on, and runs
// again with the admin certificate.
func TestStoreRoles(t *testing.T) {
	f := testetcd.StartFleet(t, 3)
	for _, c := range []struct {
		kind fleetca.Kind
		name string
	}{{fleetca.Bridge, "ops"}, {fleetca.Admin, ""}} {
		if _, err := fleetca.Issue(f.Dir, c.kind, c.name, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var members strings.Builder
	for i := range f.ClientURLs {
		fmt.Fprintf(&members, "    - {name: %s, peer_url: %q, client_url: %q}\n", testetcd.MemberName(i), f.PeerURLs[i], f.ClientURLs[i])
	}
	bridge := fleetca.FilesOf(f.Dir, fleetca.Bridge, "ops")
	cfg := strings.Replace(certsConfig, `  tls: {ca_file: pki/ca.crt, cert_file: pki/bridge-ops.crt, key_file: pki/bridge-ops.key}
  members:
    - {name: gw-1, peer_url: "https://10.0.0.1:2380", client_url: "https://10.0.0.1:2379"}
    - {name: gw-2, peer_url: "https://10.0.0.2:2380", client_url: "https://gw-2.plant:2379"}
    - {name: gw-3, peer_url: "https://10.0.0.3:2380", client_url: "https://10.0.0.3:2379"}
`, fmt.Sprintf("  tls: {ca_file: %s, cert_file: %s, key_file: %s}\n  members:\n%s", fleetca.CAFiles(f.Dir).Cert, bridge.Cert, bridge.Key, members.String()), 1)
	file := writeConfig(t, cfg)
	roles := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := storeRoles(append([]string{"-c", file}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := roles("--bridge", "ops", "--reader", "scada"); code != exitOK || !strings.Contains(out, "authentication is on") {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	if code, out := roles("--bridge", "ops", "--reader", "hmi"); code != exitRefused || !strings.Contains(out, "only the admin certificate") {
		t.Errorf("bridge certificate once authentication is on: exit %d, want %d\n%s", code, exitRefused, out)
	}
	admin := fleetca.FilesOf(f.Dir, fleetca.Admin, "")
	if code, out := roles("--bridge", "ops", "--reader", "hmi", "--cert", admin.Cert, "--key", admin.Key); code != exitOK {
		t.Errorf("admin certificate: exit %d\n%s", code, out)
	}
	if code, out := roles("-h"); code != exitOK || !strings.Contains(out, "usage: leasebridge store roles -c FILE") || strings.Contains(out, "%!") {
		t.Errorf("store roles -h: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reader", "scada"}, "at least one --bridge"},
		{[]string{"--bridge", "ops", "--cert", filepath.Join(f.Dir, "admin.crt")}, "--cert and --key go together"},
		{[]string{"--bridge", "root"}, `invalid name "root"`},
	} {
		if code, out := roles(c.args...); code != exitInvalid || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %d and %q\n%s", c.args, code, exitInvalid, c.want, out)
		}
	}
}
