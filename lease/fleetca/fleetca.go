// Package fleetca makes the certificate authority of a fleet that is its
// own lease store, and the certificates its members, bridges and readers
// present to each other. Everything lives in one directory:
//
//	ca.crt, ca.key                     the fleet's CA (ECDSA P-256)
//	member-NAME.crt, member-NAME.key   a store member: server and client
//	                                   usage, the hosts of its URLs as SANs
//	bridge-NAME.crt, bridge-NAME.key   a bridge (`leasebridge run`): client
//	reader-NAME.crt, reader-NAME.key   a reader (`leasebridge status`): client
//	admin.crt, admin.key               the store's administrator: client,
//	                                   common name root
//
// The certificate's common name is NAME: with client certificate
// authentication on, etcd takes it as the user name, so the roles
// `leasebridge store roles` creates (lease/fleetstore) apply to it. A
// gateway's member and bridge certificates both carry the gateway's node
// name and so act as one etcd user, the bridge's; only the admin
// certificate acts as etcd's root. Keys are written 0600 and nothing that
// exists is ever overwritten: a second CA would split the fleet in two.
package fleetca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// Sentinel errors.
var (
	// ErrExists reports a file that is already there: fleetca never
	// overwrites a CA, a key or a certificate.
	ErrExists = errors.New("fleetca: file exists")
	// ErrName reports a name that cannot be a certificate's common name
	// and part of its file names.
	ErrName = errors.New("fleetca: invalid name")
	// ErrNoHosts reports a member certificate with no host to name.
	ErrNoHosts = errors.New("fleetca: a member certificate needs at least one host")
	// ErrBadCA reports a CA file that cannot be used to sign.
	ErrBadCA = errors.New("fleetca: unusable CA")
)

// Validity is how long the CA and every certificate stay valid. A gateway
// fleet runs for years and an expired certificate stops the whole store,
// so it is long; issuing again is `certs` on a new directory.
const Validity = 10 * 365 * 24 * time.Hour

// Kind is what a certificate is for.
type Kind string

// The certificate kinds; each is also the prefix of its file names.
const (
	// Member is a store member: it serves clients and peers and dials its
	// peers, so its certificate carries server and client usage.
	Member Kind = "member"
	// Bridge is a `leasebridge run` process: it reads and writes rows.
	Bridge Kind = "bridge"
	// Reader is a tool that only reads rows (`leasebridge status`).
	Reader Kind = "reader"
	// Admin is the store's administrator (etcd's root user): roles,
	// member changes, snapshots. Its name is always AdminName.
	Admin Kind = "admin"
)

// AdminName is the common name of the admin certificate: etcd's root user.
const AdminName = "root"

// The CA's files inside the directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Files are the paths of one certificate and its key.
type Files struct {
	Cert, Key string
}

// FilesOf returns where the certificate of kind and name lives in dir;
// the admin's name is not part of its file names.
func FilesOf(dir string, kind Kind, name string) Files {
	base := filepath.Join(dir, string(kind)+"-"+name)
	if kind == Admin {
		base = filepath.Join(dir, string(Admin))
	}
	return Files{Cert: base + ".crt", Key: base + ".key"}
}

// CAFiles returns where the CA lives in dir.
func CAFiles(dir string) Files {
	return Files{Cert: filepath.Join(dir, CACertFile), Key: filepath.Join(dir, CAKeyFile)}
}

// validName is a name safe as a file name part and as an etcd user name.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckName refuses a name that cannot be a common name, a file name part
// and an etcd user: "root" is etcd's administrator, never a fleet identity.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w %q: want 1 to 63 of A-Z a-z 0-9 . _ -, starting with a letter or digit", ErrName, name)
	}
	if name == "root" {
		return fmt.Errorf("%w %q: etcd's administrator user, the admin certificate's alone; name the node instead", ErrName, name)
	}
	return nil
}

// Init creates dir (0700) if needed and a new CA in it. It refuses when
// either CA file exists.
func Init(dir string, now time.Time) (Files, error) {
	f := CAFiles(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("fleetca: create %s: %w", dir, err)
	}
	if err := refuseExisting(f, "a fleet has one CA: a second one would split it in two"); err != nil {
		return Files{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("fleetca: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "leasebridge fleet CA", Organization: []string{"leasebridge"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Files{}, fmt.Errorf("fleetca: sign CA: %w", err)
	}
	return f, writePair(f, der, key)
}

// Issue signs a certificate of kind for name with the CA in dir and writes
// it next to the CA. hosts (DNS names or IP addresses) become the
// certificate's SANs; a member needs at least one, the others none. The
// admin's name is AdminName whatever name says. It refuses when either of
// the certificate's files exists.
func Issue(dir string, kind Kind, name string, hosts []string, now time.Time) (Files, error) {
	if kind == Admin {
		name = AdminName
	} else if err := CheckName(name); err != nil {
		return Files{}, err
	}
	var usage []x509.ExtKeyUsage
	switch kind {
	case Member:
		if len(hosts) == 0 {
			return Files{}, fmt.Errorf("%w: member %q", ErrNoHosts, name)
		}
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case Bridge, Reader, Admin:
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return Files{}, fmt.Errorf("fleetca: unknown kind %q: want member, bridge, reader or admin", kind)
	}
	f := FilesOf(dir, kind, name)
	if err := refuseExisting(f, "remove both files first to issue it again"); err != nil {
		return Files{}, err
	}
	ca, caKey, err := LoadCA(dir)
	if err != nil {
		return Files{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("fleetca: key of %s %q: %w", kind, name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: name, OrganizationalUnit: []string{string(kind)}},
		NotBefore:      now.Add(-time.Hour),
		NotAfter:       minTime(now.Add(Validity), ca.NotAfter),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usage,
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: ca.SubjectKeyId,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Files{}, fmt.Errorf("fleetca: sign %s %q: %w", kind, name, err)
	}
	return f, writePair(f, der, key)
}

// HostsOf returns the distinct hosts of urls, in order: the SANs a member
// needs so that peers and clients dialing those URLs verify it.
func HostsOf(urls ...string) ([]string, error) {
	var hosts []string
	seen := map[string]bool{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("fleetca: URL %q has no host", raw)
		}
		if h := u.Hostname(); !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// LoadCA reads the CA certificate and key of dir and checks they belong
// together.
func LoadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	f := CAFiles(dir)
	certDER, err := readPEM(f.Cert, "CERTIFICATE")
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadCA, f.Cert, err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("%w: %s is not a CA certificate", ErrBadCA, f.Cert)
	}
	keyDER, err := readPEM(f.Key, "PRIVATE KEY")
	if err != nil {
		return nil, nil, err
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadCA, f.Key, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("%w: %s is not the key of %s", ErrBadCA, f.Key, f.Cert)
	}
	return ca, key, nil
}

func readPEM(path, typ string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fleetca: read %s: %w", path, err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != typ {
		return nil, fmt.Errorf("%w: %s: no PEM block %q", ErrBadCA, path, typ)
	}
	return b.Bytes, nil
}

func refuseExisting(f Files, hint string) error {
	for _, p := range []string{f.Cert, f.Key} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%w: %s (%s)", ErrExists, p, hint)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("fleetca: check %s: %w", p, err)
		}
	}
	return nil
}

// writePair writes the key (0600) before the certificate (0644), each
// created exclusively; a failed certificate write removes the key again.
func writePair(f Files, certDER []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("fleetca: encode %s: %w", f.Key, err)
	}
	if err := writeNew(f.Key, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	if err := writeNew(f.Cert, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})); err != nil {
		_ = os.Remove(f.Key)
		return err
	}
	return nil
}

func writeNew(path string, mode os.FileMode, data []byte) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s", ErrExists, path)
	}
	if err != nil {
		return fmt.Errorf("fleetca: create %s: %w", path, err)
	}
	if _, err := fh.Write(data); err != nil {
		_ = fh.Close()
		_ = os.Remove(path)
		return fmt.Errorf("fleetca: write %s: %w", path, err)
	}
	if err := fh.Sync(); err != nil {
		_ = fh.Close()
		_ = os.Remove(path)
		return fmt.Errorf("fleetca: sync %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("fleetca: close %s: %w", path, err)
	}
	return nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("fleetca: serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// keyID is the SHA-256 of the public key, cut to 20 bytes (RFC 7093).
func keyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(der)
	return sum[:20]
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
