// Package testkube starts a real Kubernetes API server for tests: the
// kube-apiserver v1.34.4 that internal/kubeapiserver/build.sh builds
// (once; scripts/test builds it before the tests run), in front of an etcd
// binary from PATH (testetcd.StartBinary), on a free loopback port, with
// token authentication and RBAC authorization. A harness that cannot be
// built or started fails the test; it never skips.
package testkube

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
)

// Tokens of the static token file: Admin is in system:masters; User is a
// plain authenticated user with no role until a test binds one.
const (
	AdminToken = "leasebridge-test-admin-token"
	UserToken  = "leasebridge-test-user-token"
	// UserName is the user UserToken authenticates as.
	UserName = "leasebridge-bridge"
)

// readyTimeout bounds the API server's start (about 3 s idle; the
// machine running the tests may be loaded).
const readyTimeout = 90 * time.Second

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary is the harness kube-apiserver's path, built on first use.
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		_, self, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(self), "..", "kubeapiserver", "build.sh")
		var stderr strings.Builder
		cmd := exec.Command("bash", script)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			buildErr = fmt.Errorf("testkube: %s: %w\n%s", script, err, stderr.String())
			return
		}
		binPath = strings.TrimSpace(string(out))
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// APIServer is a running kube-apiserver and its etcd.
type APIServer struct {
	t    testing.TB
	Etcd *testetcd.Cluster
	// Addr is the secure port's host:port on loopback.
	Addr string
	args []string
	bin  string
	log  *testbin.SyncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
}

// Start starts an API server with RBAC authorization over a one-member
// etcd, both stopped in t.Cleanup.
func Start(t testing.TB) *APIServer {
	t.Helper()
	bin := Binary(t)
	etcd := testetcd.StartBinary(t, 1)
	dir := t.TempDir()
	writeServiceAccountKeys(t, dir)
	tokens := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n%s,%s,bridge-uid\n", AdminToken, UserToken, UserName)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &APIServer{t: t, Etcd: etcd, Addr: testbin.FreeAddr(t), bin: bin, log: &testbin.SyncBuffer{}}
	port := s.Addr[strings.LastIndex(s.Addr, ":")+1:]
	s.args = []string{
		"--etcd-servers=" + strings.Join(etcd.Endpoints(), ","),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + port,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
	}
	t.Cleanup(s.Stop)
	s.startProcess()
	return s
}

// writeServiceAccountKeys writes the key pair the API server signs and
// verifies service-account tokens with (required flags, unused here).
func writeServiceAccountKeys(t testing.TB, dir string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*pem.Block{
		"sa.key": {Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)},
		"sa.pub": {Type: "PUBLIC KEY", Bytes: pub},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// startProcess starts the binary, waits for /readyz and returns when it
// started the process.
func (s *APIServer) startProcess() time.Time {
	s.t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	started := time.Now()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("testkube: start %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.waitReady(ctx, done); err != nil {
		s.t.Fatalf("testkube: kube-apiserver not ready: %v\n%s", err, tail(s.log.String(), 4000))
	}
	return started
}

// waitReady polls /readyz with the admin token until it answers 200.
func (s *APIServer) waitReady(ctx context.Context, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the server's certificate is self-signed
	defer hc.CloseIdleConnections()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.Addr+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills the API server (its etcd stops with the test).
func (s *APIServer) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart kills the API server and starts it again on the same port and
// etcd, waiting until it is ready, and returns when the new process was
// started (it may serve requests before /readyz says so).
func (s *APIServer) Restart() time.Time {
	s.t.Helper()
	s.Stop()
	return s.startProcess()
}

// Log is the API server's output so far.
func (s *APIServer) Log() string { return s.log.String() }

// Config is a client configuration for token at Addr (via addr instead
// when not empty: a fault proxy's).
func (s *APIServer) Config(token, addr string) *rest.Config {
	if addr == "" {
		addr = s.Addr
	}
	return &rest.Config{Host: "https://" + addr, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// Admin is a clientset in system:masters.
func (s *APIServer) Admin() kubernetes.Interface {
	s.t.Helper()
	cs, err := kubernetes.NewForConfig(s.Config(AdminToken, ""))
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig file for token at addr (Addr when empty)
// whose context's namespace is ns, and returns its path.
func (s *APIServer) Kubeconfig(token, addr, ns string) string {
	s.t.Helper()
	if addr == "" {
		addr = s.Addr
	}
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://%s
    insecure-skip-tls-verify: true
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test, namespace: %s}
current-context: test
`, addr, token, ns)
	path := filepath.Join(s.t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// Namespace creates a namespace named after the test and returns it.
func (s *APIServer) Namespace(name string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Admin().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("testkube: create namespace %s: %v", name, err)
	}
	return name
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// ApplyRole creates the Role and RoleBinding of the RBAC manifest file
// (examples/kubernetes/lease-rbac.yaml) in ns, decoded strictly, with
// the binding's subject replaced by the test user (UserToken), and
// returns the Role as created.
func (s *APIServer) ApplyRole(file, ns string) *rbacv1.Role {
	s.t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var role *rbacv1.Role
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			s.t.Fatal(err)
		}
		switch tm.Kind {
		case "Role":
			r := &rbacv1.Role{}
			if err := yaml.UnmarshalStrict([]byte(doc), r); err != nil {
				s.t.Fatal(err)
			}
			r.Namespace = ns
			if role, err = s.Admin().RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
				s.t.Fatal(err)
			}
		case "RoleBinding":
			b := &rbacv1.RoleBinding{}
			if err := yaml.UnmarshalStrict([]byte(doc), b); err != nil {
				s.t.Fatal(err)
			}
			b.Namespace = ns
			b.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: UserName}}
			if _, err := s.Admin().RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	if role == nil {
		s.t.Fatalf("%s: no Role", file)
	}
	return role
}

// LeaseRequests reads the API server's apiserver_request_total for the
// leases resource and returns the requests it has served so far by verb
// (GET, LIST, POST, PATCH, PUT, ...), whatever their status code.
func (s *APIServer) LeaseRequests(ctx context.Context) (map[string]float64, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // self-signed, as in waitReady
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.Addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("testkube: /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("testkube: /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="leases"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `verb="`)
		verb, _, _ := strings.Cut(rest, `"`)
		var n float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &n); err == nil {
			out[verb] += n
		}
	}
	return out, nil
}
