package testmqtt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a throw-away certificate authority with one server certificate
// (for 127.0.0.1 and localhost) and one client certificate, written as PEM
// files into a test's temporary directory. Nothing is ever committed.
type PKI struct {
	Dir                      string
	CAFile                   string
	ServerCert, ServerKey    string
	ClientCert, ClientKey    string
	OtherCAFile              string // a second, unrelated CA: verifying against it fails
	ClientCommonName         string
	serverNotBefore, expires time.Time
}

// NewPKI generates the certificates.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{Dir: dir, ClientCommonName: "leasebridge-test-client"}
	now := time.Now()
	p.serverNotBefore, p.expires = now.Add(-time.Hour), now.Add(24*time.Hour)

	caKey, caCert, caDER := newCA(t, "leasebridge test CA", p.serverNotBefore, p.expires)
	p.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	_, _, otherDER := newCA(t, "unrelated CA", p.serverNotBefore, p.expires)
	p.OtherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", otherDER)

	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    p.serverNotBefore,
		NotAfter:     p.expires,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	p.ServerCert, p.ServerKey = issue(t, dir, "server", srv, caCert, caKey)

	cl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: p.ClientCommonName},
		NotBefore:    p.serverNotBefore,
		NotAfter:     p.expires,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	p.ClientCert, p.ClientKey = issue(t, dir, "client", cl, caCert, caKey)
	return p
}

func newCA(t testing.TB, name string, from, to time.Time) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             from,
		NotAfter:              to,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func issue(t testing.TB, dir, name string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", kder)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
