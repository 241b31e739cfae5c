package routes_test

import (
	"strings"
	"testing"
)

// storeBase is base with its endpoints replaced by three https members,
// node a among them, with its certificates.
var storeBase = strings.Replace(base, "lease_store:\n  endpoints: [http://127.0.0.1:2379]\n", `node: a
lease_store:
  member_tls: {ca_file: ca.pem, cert_file: a.pem, key_file: a-key.pem}
  members:
    - {name: a, peer_url: "https://10.0.0.1:2380", client_url: "https://10.0.0.1:2379"}
    - {name: b, peer_url: "https://10.0.0.2:2380", client_url: "https://10.0.0.2:2379"}
    - {name: c, peer_url: "https://10.0.0.3:2380", client_url: "https://10.0.0.3:2379"}
`, 1)

const storeRoute = "routes:\n  - {name: r, session: s, kind: poll, device: plc, broker: local}\n"

func TestStoreMembersAccepted(t *testing.T) {
	cfg, errs := parse(t, storeBase+storeRoute)
	if errs != nil {
		t.Fatal(errs)
	}
	if got := strings.Join(cfg.StoreEndpoints(), " "); got != "https://10.0.0.1:2379 https://10.0.0.2:2379 https://10.0.0.3:2379" {
		t.Errorf("endpoints %s", got)
	}
	if w := cfg.StoreWarnings(); len(w) != 0 || cfg.IsWitness() {
		t.Errorf("warnings %v, witness %v", w, cfg.IsWitness())
	}
}

// Every rule of lease_store.members names its key and line.
func TestStoreMemberRules(t *testing.T) {
	for name, c := range map[string]struct {
		from, to string
		want     []string
	}{
		"duplicate name": {"name: c,", "name: b,", []string{"members[2].name: duplicate member name \"b\" (first in lease_store.members[1])"}},
		"duplicate url":  {"10.0.0.3:2379", "10.0.0.2:2380", []string{"members[2].client_url: 10.0.0.2:2380 is also lease_store.members[1].peer_url"}},
		"bad url":        {"https://10.0.0.3:2379", "https://10.0.0.3", []string{"members[2].client_url: \"https://10.0.0.3\": want https://host:port"}},
		"plaintext":      {"https://10.0.0.3:2379", "http://10.0.0.3:2379", []string{"is plaintext: members use TLS"}},
		"no name":        {"name: c, ", "", []string{"members[2]: name is required"}},
		"with endpoints": {"lease_store:\n", "lease_store:\n  endpoints: [https://10.0.0.9:2379]\n", []string{"endpoints and members are both set"}},
		"no member tls":  {"  member_tls: {ca_file: ca.pem, cert_file: a.pem, key_file: a-key.pem}\n", "", []string{"member_tls needs ca_file", "tls needs ca_file, cert_file and key_file"}},
		"election < 5 heartbeats": {"lease_store:\n", "lease_store:\n  heartbeat_interval: 300ms\n",
			[]string{"cfg.yaml:4:3: lease_store.heartbeat_interval: election_timeout 1s is less than 5 x heartbeat_interval 300ms = 1.5s"}},
		"election not a multiple": {"lease_store:\n", "lease_store:\n  election_timeout: 1250ms\n  heartbeat_interval: 100ms\n",
			[]string{"election_timeout 1.25s is not a multiple of heartbeat_interval 100ms"}},
		"sub-millisecond":   {"lease_store:\n", "lease_store:\n  heartbeat_interval: 100500us\n", []string{"heartbeat_interval 100.5ms: etcd counts it in whole milliseconds"}},
		"election too long": {"lease_store:\n", "lease_store:\n  election_timeout: 60s\n", []string{"election_timeout 1m0s: etcd accepts at most 50s"}},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(storeBase, c.from) {
				t.Fatalf("%q not in the file", c.from)
			}
			wantErrors(t, strings.Replace(storeBase, c.from, c.to, 1)+storeRoute, c.want...)
		})
	}
}

// plaintext: true makes http:// members valid and https:// ones not.
func TestStorePlaintextOptIn(t *testing.T) {
	y := strings.ReplaceAll(storeBase, "https://", "http://")
	y = strings.Replace(y, "  member_tls: {ca_file: ca.pem, cert_file: a.pem, key_file: a-key.pem}\n", "  plaintext: true\n", 1)
	if _, errs := parse(t, y+storeRoute); errs != nil {
		t.Fatal(errs)
	}
	y = strings.Replace(y, "http://10.0.0.1:2380", "https://10.0.0.1:2380", 1)
	wantErrors(t, y+storeRoute, "members[0].peer_url: \"https://10.0.0.1:2380\" is https but lease_store.plaintext is true")
}

// A file with members and no routes is a witness's: valid when its node
// is a member, refused at node otherwise; an even count is warned about.
func TestWitnessAndEvenCount(t *testing.T) {
	cfg, errs := parse(t, storeBase)
	if errs != nil || !cfg.IsWitness() {
		t.Fatalf("witness: %v %v", errs, cfg)
	}
	wantErrors(t, strings.Replace(storeBase, "node: a\n", "node: z\n", 1),
		"cfg.yaml:2:1: node: node \"z\" is not one of lease_store.members (a, b, c): a file without routes is a witness's")
	two := strings.Replace(storeBase, "    - {name: c, peer_url: \"https://10.0.0.3:2380\", client_url: \"https://10.0.0.3:2379\"}\n", "", 1)
	cfg, errs = parse(t, two+storeRoute)
	if errs != nil {
		t.Fatal(errs)
	}
	w := cfg.StoreWarnings()
	if len(w) != 1 || w[0].Line == 0 || !strings.Contains(w[0].Error(), "the loss of either member stops the store") {
		t.Fatalf("warnings %v", w)
	}
	// A bridge-only node outside the members needs only a client
	// certificate.
	y := strings.Replace(strings.Replace(storeBase, "node: a\n", "node: z\n", 1), "member_tls:", "tls:", 1)
	if _, errs := parse(t, y+storeRoute); errs != nil {
		t.Fatal(errs)
	}
}
