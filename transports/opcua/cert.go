package opcua

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// clientIdentity loads the client certificate and key, creating a
// self-signed pair on first use. The pair must persist: a server trusts a
// client by its certificate, so a new one at every start would have to be
// trusted again by hand.
func clientIdentity(certFile, keyFile, appURI string) ([]byte, *rsa.PrivateKey, error) {
	certPEM, cerr := os.ReadFile(certFile)
	keyPEM, kerr := os.ReadFile(keyFile)
	if errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist) {
		return createIdentity(certFile, keyFile, appURI)
	}
	if cerr != nil {
		return nil, nil, fmt.Errorf("%w: cert_file %s: %w", ErrConfig, certFile, cerr)
	}
	if kerr != nil {
		return nil, nil, fmt.Errorf("%w: key_file %s: %w", ErrConfig, keyFile, kerr)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%w: cert_file %s: no PEM CERTIFICATE block", ErrConfig, certFile)
	}
	if _, err := x509.ParseCertificate(cb.Bytes); err != nil {
		return nil, nil, fmt.Errorf("%w: cert_file %s: %w", ErrConfig, certFile, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("%w: key_file %s: no PEM block", ErrConfig, keyFile)
	}
	var key *rsa.PrivateKey
	switch kb.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(kb.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: key_file %s: %w", ErrConfig, keyFile, err)
		}
		key = k
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: key_file %s: %w", ErrConfig, keyFile, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, nil, fmt.Errorf("%w: key_file %s: OPC UA needs an RSA key, not %T", ErrConfig, keyFile, k)
		}
		key = rk
	default:
		return nil, nil, fmt.Errorf("%w: key_file %s: PEM block %q, want RSA PRIVATE KEY or PRIVATE KEY", ErrConfig, keyFile, kb.Type)
	}
	return cb.Bytes, key, nil
}

// createIdentity writes a new RSA-2048 self-signed certificate whose URI
// names the client application, as Basic256Sha256 requires.
func createIdentity(certFile, keyFile, appURI string) ([]byte, *rsa.PrivateKey, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(appURI)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: application URI %q: %w", ErrConfig, appURI, err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "leasebridge", Organization: []string{"leasebridge"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageDataEncipherment | x509.KeyUsageContentCommitment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{u},
		DNSNames:              []string{host},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range []string{certFile, keyFile} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return nil, nil, fmt.Errorf("opcua: create client certificate directory: %w", err)
		}
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, nil, fmt.Errorf("opcua: write key_file: %w", err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, fmt.Errorf("opcua: write cert_file: %w", err)
	}
	return der, key, nil
}
