package testetcd

import "testing"

// TLSFiles are PEM files: a certificate, its key, and the CA that signs
// the other side's certificate.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// WritePKI writes a throwaway CA, a server certificate for 127.0.0.1 and a
// client certificate into a temporary directory (NewCA's, so both serve
// either side).
func WritePKI(t testing.TB) (server, client TLSFiles) {
	t.Helper()
	ca := NewCA(t, "testetcd")
	return ca.Issue("server"), ca.Issue("client")
}
