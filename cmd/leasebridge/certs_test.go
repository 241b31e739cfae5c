package main

import (
	"crypto/tls"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// certsConfig names three members; the node itself runs none.
const certsConfig = `deployment_mode: standalone
node: ops
lease_store:
  tls: {ca_file: pki/ca.crt, cert_file: pki/bridge-ops.crt, key_file: pki/bridge-ops.key}
  members:
    - {name: gw-1, peer_url: "https://10.0.0.1:2380", client_url: "https://10.0.0.1:2379"}
    - {name: gw-2, peer_url: "https://10.0.0.2:2380", client_url: "https://gw-2.plant:2379"}
    - {name: gw-3, peer_url: "https://10.0.0.3:2380", client_url: "https://10.0.0.3:2379"}
manager: {failover_slo: 10m}
brokers:
  local: {url: tcp://127.0.0.1:1883}
devices:
  plc:
    kind: modbus_tcp
    address: 127.0.0.1:502
    groups:
      - name: g
        tags:
          - {name: t1, register: holding, address: 1, type: int16}
routes:
  - {name: r, session: s, kind: poll, device: plc, broker: local}
`

// certs makes the CA once, a member certificate naming the hosts of its
// URLs in the file, and refuses what it must with the documented status.
func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	file := writeConfig(t, certsConfig)
	if code, out, errs := runCmd(t, "certs", "init", "--dir", dir); code != exitOK || !strings.Contains(out, "ca.key") {
		t.Fatalf("init: exit %d %s%s", code, out, errs)
	}
	if code, _, errs := runCmd(t, "certs", "init", "--dir", dir); code != exitRefused || !strings.Contains(errs, filepath.Join(dir, "ca.crt")) {
		t.Errorf("second init: exit %d %s, want %d naming ca.crt", code, errs, exitRefused)
	}
	if code, out, errs := runCmd(t, "certs", "member", "gw-2", "--dir", dir, "-c", file, "--host", "localhost"); code != exitOK {
		t.Fatalf("member: exit %d %s%s", code, out, errs)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "member-gw-2.crt"), filepath.Join(dir, "member-gw-2.key"))
	if err != nil {
		t.Fatal(err)
	}
	var sans []string
	for _, ip := range pair.Leaf.IPAddresses {
		sans = append(sans, ip.String())
	}
	sans = append(sans, pair.Leaf.DNSNames...)
	if want := []string{"10.0.0.2", "gw-2.plant", "localhost"}; !slices.Equal(sans, want) || pair.Leaf.Subject.CommonName != "gw-2" {
		t.Errorf("member gw-2: CN %q SANs %v, want gw-2 and %v", pair.Leaf.Subject.CommonName, sans, want)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"member", "gw-9", "-c", file}, exitInvalid, `no member "gw-9" in lease_store.members (gw-1, gw-2, gw-3)`},
		{[]string{"member", "gw-1"}, exitInvalid, "give -c FILE"},
		{[]string{"bridge", "root"}, exitInvalid, `invalid name "root"`},
		{[]string{"bridge"}, exitInvalid, "bridge takes one NAME"},
		{[]string{"member", "gw-2", "-c", file}, exitRefused, "member-gw-2.crt"},
		{[]string{"reader", "ops", "--dir", t.TempDir()}, exitRefused, "ca.crt"},
	} {
		args := append([]string{"certs"}, c.args...)
		if !slices.Contains(args, "--dir") {
			args = append(args, "--dir", dir)
		}
		if code, _, errs := runCmd(t, args...); code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d %s, want %d and %q", strings.Join(c.args, " "), code, errs, c.code, c.want)
		}
	}
}
