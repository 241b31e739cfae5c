package opcua

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
)

// startNodeOPCUA runs testdata/nodeopcua/server.js (node-opcua) for the
// secure tests: the gopcua server (v0.8.0) never leaves security mode None
// on its channels, so it cannot decrypt a Basic256Sha256 request. The
// node modules are installed from the lock file if absent (.ci/run does it
// up front).
func startNodeOPCUA(t *testing.T) (endpoint string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "nodeopcua"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-opcua")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s (needs node and npm): %v\n%s", dir, err, out)
		}
	}
	port := uatest.FreePort(t)
	cmd := exec.Command("node", "server.js", strconv.Itoa(port), t.TempDir())
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node-opcua server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "READY ") {
				ready <- line
			}
		}
		close(ready)
	}()
	select {
	case line, ok := <-ready:
		if !ok {
			t.Fatalf("node-opcua server exited: %s", stderr.String())
		}
		if f := strings.Fields(line); len(f) != 3 || f[1] != "1" {
			t.Fatalf("node-opcua server: %q, want namespace 1", line)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("node-opcua server not ready: %s", stderr.String())
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// TestBasic256Sha256 connects with SignAndEncrypt and a user name to a
// server that offers nothing else: the client certificate is created on
// first use and reused afterwards, a wrong password and an anonymous user
// are refused, and the endpoint query plus the session never overlap.
func TestBasic256Sha256(t *testing.T) {
	addr := startNodeOPCUA(t)
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("guess\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "pki", "client.crt"), filepath.Join(dir, "pki", "client.key")
	mk := func(user, pwFile, mode string) *routes.Device {
		return &routes.Device{Kind: Kind, Address: "opc.tcp://" + addr,
			Settings: &Config{SecurityPolicy: "Basic256Sha256", SecurityMode: mode, CertFile: certFile, KeyFile: keyFile,
				Credentials: routes.Credentials{Username: user, PasswordFile: pwFile}},
			ConnectTimeout: routes.Duration(10 * time.Second), RequestTimeout: routes.Duration(5 * time.Second),
			Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "ns=1;s=x", Writable: true}}}}}
	}
	open := func(dev *routes.Device) (*Transport, *faultproxy.Proxy, error) {
		px, err := faultproxy.Start(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		dev.Address = "opc.tcp://" + px.Addr()
		tr, err := New("secure", dev)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr, px, tr.Open(context.Background())
	}

	tr, px, err := open(mk("operator", pw, "SignAndEncrypt"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	vals, err := tr.Poll(context.Background(), "g")
	if err != nil || vals[0].Value != int32(9) {
		t.Fatalf("poll: %+v %v", vals, err)
	}
	if err := tr.Write(context.Background(), "x", 11); err != nil {
		t.Fatal(err)
	}
	vals, err = tr.Poll(context.Background(), "g")
	if err != nil || vals[0].Value != int32(11) {
		t.Fatalf("poll after write: %+v %v", vals, err)
	}
	if st := px.Stats(); st.Accepted != 2 {
		t.Errorf("%d connections, want 2: the endpoint query, then the session", st.Accepted)
	}
	first, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatalf("client certificate not persisted: %v", err)
	}
	_ = tr.Close(context.Background())

	tr2, _, err := open(mk("operator", pw, "SignAndEncrypt"))
	if err != nil {
		t.Fatalf("Open with the stored certificate: %v", err)
	}
	if vals, err := tr2.Poll(context.Background(), "g"); err != nil || vals[0].Value != int32(11) {
		t.Fatalf("poll: %+v %v", vals, err)
	}
	if again, _ := os.ReadFile(certFile); !bytes.Equal(first, again) {
		t.Error("the client certificate changed between sessions")
	}
	_ = tr2.Close(context.Background())

	if _, _, err := open(mk("operator", bad, "SignAndEncrypt")); !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "StatusBad") {
		t.Errorf("Open with a wrong password: %v, want ErrConnect", err)
	}
	if _, _, err := open(mk("", "", "SignAndEncrypt")); !errors.Is(err, ErrConnect) {
		t.Errorf("Open as anonymous on a server without anonymous access: %v, want ErrConnect", err)
	}
	if _, _, err := open(mk("operator", pw, "Sign")); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "no endpoint") {
		t.Errorf("Open with a mode the server does not offer: %v", err)
	}
}
