package fleetca

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustInit(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := Init(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadLeaf(t *testing.T, f Files) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatalf("the pair does not load as tls does: %v", err)
	}
	return pair.Leaf
}

func pool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	ca, _, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}

// A second init never replaces the CA: its error names the file, and
// ca.key is untouched.
func TestInitRefusesExistingCA(t *testing.T) {
	dir := mustInit(t)
	before, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Init(dir, time.Now())
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), filepath.Join(dir, CACertFile)) {
		t.Fatalf("second init: %v, want ErrExists naming %s", err, CACertFile)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if string(before) != string(after) {
		t.Fatal("ca.key changed")
	}
}

// Keys are 0600 and the directory 0700; certificates are readable.
func TestFileModes(t *testing.T) {
	dir := mustInit(t)
	f, err := Issue(dir, Bridge, "edge-gw-1", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		dir: 0o700, filepath.Join(dir, CAKeyFile): 0o600, f.Key: 0o600, f.Cert: 0o644,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// The umask may only remove bits.
		if got := st.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s: mode %v, want at most %v", path, got, want)
		}
	}
}

// A member certificate carries its hosts as SANs and verifies for both
// server and client use; CN is the member's name.
func TestMemberCertificate(t *testing.T) {
	dir := mustInit(t)
	hosts, err := HostsOf("https://10.0.0.1:2380", "https://edge-gw-1.plant:2379", "https://10.0.0.1:2379")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hosts, []string{"10.0.0.1", "edge-gw-1.plant"}) {
		t.Fatalf("hosts %v", hosts)
	}
	f, err := Issue(dir, Member, "edge-gw-1", hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if f != FilesOf(dir, Member, "edge-gw-1") || filepath.Base(f.Cert) != "member-edge-gw-1.crt" {
		t.Fatalf("files %+v", f)
	}
	leaf := loadLeaf(t, f)
	if leaf.Subject.CommonName != "edge-gw-1" {
		t.Errorf("CN %q", leaf.Subject.CommonName)
	}
	roots := pool(t, dir)
	for _, host := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server use for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client use: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.plant", Roots: roots}); err == nil {
		t.Error("verified for a host it does not name")
	}
}

// Bridge and reader certificates are client certificates only, signed by
// this CA and by no other.
func TestClientCertificates(t *testing.T) {
	dir, other := mustInit(t), mustInit(t)
	for _, kind := range []Kind{Bridge, Reader, Admin} {
		f, err := Issue(dir, kind, "ops-1", nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		leaf := loadLeaf(t, f)
		if want := map[Kind]string{Admin: AdminName}[kind]; want != "" && leaf.Subject.CommonName != want {
			t.Errorf("%s: CN %q, want %q", kind, leaf.Subject.CommonName, want)
		}
		if kind == Admin && filepath.Base(f.Key) != "admin.key" {
			t.Errorf("admin key at %s, want admin.key", f.Key)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, dir), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: client use: %v", kind, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, dir), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("%s: verified for server use", kind)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, other), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
			t.Errorf("%s: verified against another fleet's CA", kind)
		}
	}
}

// Refusals name what is wrong: an existing certificate, a bad or reserved
// name, a member with no host, a directory with no CA.
func TestIssueRefusals(t *testing.T) {
	dir := mustInit(t)
	if _, err := Issue(dir, Bridge, "gw", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		dir, name string
		kind      Kind
		hosts     []string
		want      error
		mention   string
	}{
		{dir, "gw", Bridge, nil, ErrExists, "bridge-gw.crt"},
		{dir, "root", Bridge, nil, ErrName, "root"},
		{dir, "../x", Reader, nil, ErrName, "../x"},
		{dir, "", Reader, nil, ErrName, `""`},
		{dir, "m1", Member, nil, ErrNoHosts, "m1"},
		{t.TempDir(), "gw", Bridge, nil, os.ErrNotExist, CACertFile},
	}
	for _, c := range cases {
		_, err := Issue(c.dir, c.kind, c.name, c.hosts, time.Now())
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s %q: %v, want %v naming %s", c.kind, c.name, err, c.want, c.mention)
		}
	}
}

// A CA key that is not the CA certificate's is refused before signing.
func TestMismatchedCAKeyRefused(t *testing.T) {
	dir, other := mustInit(t), mustInit(t)
	key, err := os.ReadFile(filepath.Join(other, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Issue(dir, Bridge, "gw", nil, time.Now())
	if !errors.Is(err, ErrBadCA) || !strings.Contains(err.Error(), CAKeyFile) {
		t.Fatalf("%v, want ErrBadCA naming %s", err, CAKeyFile)
	}
}
