package testmqtt

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/lease/fleetca"
)

// PKI is a throw-away certificate authority with one server certificate
// (for 127.0.0.1 and localhost) and one client certificate, written as PEM
// files into a test's temporary directory by lease/fleetca, the code
// behind `leasebridge certs`. Nothing is ever committed.
type PKI struct {
	Dir                   string
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	OtherCAFile           string // a second, unrelated CA: verifying against it fails
	ClientCommonName      string
}

// NewPKI generates the certificates: the server's is a fleet member's
// (server auth), the client's a bridge's (client auth only).
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{Dir: dir, ClientCommonName: "leasebridge-test-client"}
	now := time.Now()
	ca, err := fleetca.Init(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := fleetca.Init(filepath.Join(dir, "other"), now)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fleetca.Issue(dir, fleetca.Member, "localhost", []string{"localhost", "127.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := fleetca.Issue(dir, fleetca.Bridge, p.ClientCommonName, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	p.CAFile, p.OtherCAFile = ca.Cert, other.Cert
	p.ServerCert, p.ServerKey = srv.Cert, srv.Key
	p.ClientCert, p.ClientKey = cl.Cert, cl.Key
	return p
}
