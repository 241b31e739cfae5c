package examples

import (
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/routes"

	// The device kinds the example names.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

const (
	fleetStoreExample = "edge-fleet-store.yaml"
	installDoc        = "../docs/install-systemd.md"
)

// storeTLS is the part of a file naming the member's and the bridge's
// certificates.
type storeTLS struct {
	LeaseStore struct {
		MemberTLS map[string]string `yaml:"member_tls"`
		TLS       map[string]string `yaml:"tls"`
	} `yaml:"lease_store"`
}

// credentials are the names a unit loads with LoadCredential=NAME:PATH,
// as /run/credentials/UNIT/NAME paths, from the unit file and from the
// drop-in docs/install-systemd.md writes for it.
func credentials(t *testing.T, unit string, texts ...string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^LoadCredential=([^:\s]+):`)
	out := map[string]bool{}
	for _, text := range texts {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			out["/run/credentials/"+unit+"/"+m[1]] = true
		}
	}
	return out
}

func read(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// The certificate files edge-fleet-store.yaml names are the credentials
// each unit loads: the member's from leasebridge-store.service, the
// bridge's from the drop-in docs/install-systemd.md gives leasebridge.service.
func TestFleetStoreFilesAreUnitCredentials(t *testing.T) {
	var f storeTLS
	if err := yaml.Unmarshal([]byte(read(t, fleetStoreExample)), &f); err != nil {
		t.Fatal(err)
	}
	doc := read(t, installDoc)
	for _, c := range []struct {
		unit  string
		files map[string]string
		texts []string
	}{
		{"leasebridge-store.service", f.LeaseStore.MemberTLS, []string{read(t, storeUnitFile)}},
		{"leasebridge.service", f.LeaseStore.TLS, []string{read(t, unitFile), doc}},
	} {
		have := credentials(t, c.unit, c.texts...)
		if len(c.files) != 3 {
			t.Errorf("%s: want ca_file, cert_file and key_file for %s, got %v", fleetStoreExample, c.unit, c.files)
		}
		for key, p := range c.files {
			if !have[p] {
				t.Errorf("%s: %s %s is not a credential %s loads (%v)", fleetStoreExample, key, p, c.unit, have)
			}
		}
	}
}

// The witness file docs/install-systemd.md shows is valid, runs no
// session, names the witness among the members, and shares the example's
// key prefix and its first two members.
func TestWitnessFileInDocs(t *testing.T) {
	doc := read(t, installDoc)
	_, section, ok := strings.Cut(doc, "### Two gateways and a witness")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s: no yaml block under \"Two gateways and a witness\"", installDoc)
	}
	witness, err := routes.Parse(installDoc+" (witness)", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	gateways, err := routes.Load(fleetStoreExample)
	if err != nil {
		t.Fatal(err)
	}
	w, g := witness.LeaseStore, gateways.LeaseStore
	if len(witness.Routes) != 0 || w.KeyPrefix != g.KeyPrefix || !slices.Equal(w.Members[:2], g.Members[:2]) {
		t.Errorf("witness: %d routes, key_prefix %s, members %v; want none, %s, and %v first", len(witness.Routes), w.KeyPrefix, w.Members, g.KeyPrefix, g.Members[:2])
	}
	if w.HeartbeatInterval != g.HeartbeatInterval || w.ElectionTimeout != g.ElectionTimeout {
		t.Errorf("witness raft timing %v/%v, the gateways' %v/%v", w.HeartbeatInterval, w.ElectionTimeout, g.HeartbeatInterval, g.ElectionTimeout)
	}
	if !slices.ContainsFunc(w.Members, func(m routes.StoreMember) bool { return m.Name == witness.Node }) {
		t.Errorf("witness node %q is not a member", witness.Node)
	}
	var f storeTLS
	if err := yaml.Unmarshal([]byte(block), &f); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.LeaseStore.MemberTLS {
		if path.Dir(p) != "/run/credentials/leasebridge-store.service" {
			t.Errorf("witness member_tls %s is not a credential of leasebridge-store.service", p)
		}
	}
}
