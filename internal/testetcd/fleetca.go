package testetcd

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/lease/fleetca"
)

// CA is a throwaway fleet CA made by lease/fleetca, the code behind
// `leasebridge certs`: its certificates are member certificates for
// 127.0.0.1 and localhost (server and client auth, as a fleet store
// member's must be: peer traffic goes both ways), so tests run on the
// certificates operators get.
type CA struct {
	// File is the CA certificate's PEM file.
	File string
	t    testing.TB
	dir  string
}

// NewCA creates a CA in a temporary directory named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	f, err := fleetca.Init(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &CA{File: f.Cert, t: t, dir: dir}
}

// Issue returns a certificate and key for name, signed by the CA, with
// the CA as CAFile; a second call for the same name returns the same
// files. fleetca.AdminName gets the admin certificate (client auth only).
func (ca *CA) Issue(name string) TLSFiles {
	ca.t.Helper()
	kind := fleetca.Member
	if name == fleetca.AdminName {
		kind = fleetca.Admin
	}
	f := fleetca.FilesOf(ca.dir, kind, name)
	if _, err := os.Stat(f.Cert); err != nil {
		if f, err = fleetca.Issue(ca.dir, kind, name, []string{"127.0.0.1", "localhost"}, time.Now()); err != nil {
			ca.t.Fatal(err)
		}
	}
	return TLSFiles{CAFile: ca.File, CertFile: f.Cert, KeyFile: f.Key}
}
