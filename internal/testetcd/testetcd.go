// Package testetcd starts real etcd clusters for tests: in process through
// go.etcd.io/etcd/server/v3/embed, or as the Debian etcd binary found on
// PATH. Members listen on free loopback ports, keep their data in
// t.TempDir(), use a 10 ms heartbeat and a 100 ms election timeout, and are
// stopped in t.Cleanup. Members can be killed and restarted with the same
// data and ports, and the leader can be found, for fault tests.
package testetcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/freeport"
)

// startTimeout bounds how long a cluster may take to elect a leader.
const startTimeout = 20 * time.Second

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	binary  string // path of the etcd binary; empty for embedded members
	members []*member
}

type member struct {
	name               string
	dir                string
	clientURL, peerURL string
	initialCluster     string
	tls                *TLSFiles
	edit               func(*embed.Config) // StartEmbeddedWith's

	mu   sync.Mutex
	emb  *embed.Etcd
	stop func() // stops this incarnation once
	cmd  *exec.Cmd
	log  *testbin.SyncBuffer
}

// StartEmbedded starts an n-member cluster inside the test process.
func StartEmbedded(t testing.TB, n int) *Cluster {
	t.Helper()
	c := newCluster(t, n, "")
	c.startAll()
	return c
}

// StartEmbeddedWith starts an n-member cluster inside the test process,
// with edit applied to each member's configuration before it starts: a
// server limit under test, such as MaxTxnOps.
func StartEmbeddedWith(t testing.TB, n int, edit func(*embed.Config)) *Cluster {
	t.Helper()
	c := newCluster(t, n, "")
	for _, m := range c.members {
		m.edit = edit
	}
	c.startAll()
	return c
}

// StartEmbeddedTLS starts an n-member cluster inside the test process
// whose client URLs are https with server's certificate and which
// require a client certificate signed by server.CAFile.
func StartEmbeddedTLS(t testing.TB, n int, server TLSFiles) *Cluster {
	t.Helper()
	c := newCluster(t, n, "")
	for _, m := range c.members {
		m.tls = &server
		m.clientURL = strings.Replace(m.clientURL, "http://", "https://", 1)
	}
	c.startAll()
	return c
}

// StartBinary starts an n-member cluster of the etcd binary on PATH (the
// Debian etcd-server package). A missing binary fails the test: the real
// binary is part of what the tests promise to have checked.
func StartBinary(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd binary not found on PATH (%v): install etcd-server (scripts/test does)", err)
	}
	c := newCluster(t, n, bin)
	c.startAll()
	return c
}

func newCluster(t testing.TB, n int, bin string) *Cluster {
	c := &Cluster{t: t, binary: bin}
	var peers []string
	for i := range n {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(t.TempDir(), "data"),
			clientURL: "http://" + freeAddr(t),
			peerURL:   "http://" + freeAddr(t),
		}
		peers = append(peers, m.name+"="+m.peerURL)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initialCluster = strings.Join(peers, ",")
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			// Never let a stuck stop hang the whole test binary.
			done := make(chan struct{})
			go func() { defer close(done); m.kill() }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Logf("testetcd: %s did not stop within 15s; abandoned", m.name)
			}
		}
	})
	return c
}

// freeAddr returns a loopback address with a port that was free a moment
// ago: etcd's initial cluster needs every port before any member starts.
func freeAddr(t testing.TB) string {
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatalf("testetcd: free port: %v", err)
	}
	return addr
}

func (c *Cluster) startAll() {
	c.t.Helper()
	for _, m := range c.members {
		if err := c.start(m); err != nil {
			c.t.Fatalf("testetcd: start %s: %v", m.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, m := range c.members {
		if err := m.ready(ctx); err != nil {
			c.t.Fatalf("testetcd: %s: %v%s", m.name, err, c.logs())
		}
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		c.t.Fatalf("testetcd: %v%s", err, c.logs())
	}
}

// ready waits until the member serves clients with a leader known. An
// embedded member must be ready before it is closed: embed's Close blocks
// forever on a member that never became ready.
func (m *member) ready(ctx context.Context) error {
	m.mu.Lock()
	e := m.emb
	m.mu.Unlock()
	if e != nil {
		select {
		case <-e.Server.ReadyNotify():
			return nil
		case err := <-e.Err():
			return err
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		}
	}
	for {
		if _, err := m.statusLeader(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Kill stops member i abruptly (SIGKILL for the binary; an embedded member
// is closed, which is the closest a process can come to killing a part of
// itself).
func (c *Cluster) Kill(i int) { c.members[i].kill() }

// Restart starts member i again on its data and ports and waits until it
// is ready, which needs a quorum of running members.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	if err := c.start(m); err != nil {
		c.t.Fatalf("testetcd: restart %s: %v", m.name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := m.ready(ctx); err != nil {
		c.t.Fatalf("testetcd: restart %s: %v%s", m.name, err, c.logs())
	}
}

// WaitLeader waits until a running member reports itself leader and
// returns its index.
func (c *Cluster) WaitLeader(ctx context.Context) (int, error) {
	for {
		if i, ok := c.leader(ctx); ok {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no etcd leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *Cluster) leader(ctx context.Context) (int, bool) {
	for i, m := range c.members {
		if c.binary == "" {
			m.mu.Lock()
			e := m.emb
			m.mu.Unlock()
			if e != nil && e.Server.Leader() == e.Server.MemberID() {
				return i, true
			}
			continue
		}
		if ok, err := m.statusLeader(ctx); err == nil && ok {
			return i, true
		}
	}
	return -1, false
}

// statusLeader asks a binary member through its JSON gateway whether it
// is the leader.
func (m *member) statusLeader(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.clientURL+"/v3/maintenance/status", strings.NewReader("{}"))
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return false, fmt.Errorf("status of %s: %w", m.name, err)
	}
	return st.Leader != "" && st.Leader != "0" && st.Leader == st.Header.MemberID, nil
}

func (c *Cluster) start(m *member) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		return errors.New("already running")
	}
	if c.binary != "" {
		return m.startBinary(c.binary)
	}
	return m.startEmbedded()
}

func (m *member) startEmbedded() error {
	cu, err := url.Parse(m.clientURL)
	if err != nil {
		return err
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	if m.tls != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: m.tls.CertFile, KeyFile: m.tls.KeyFile, TrustedCAFile: m.tls.CAFile, ClientCertAuth: true}
	}
	cfg.InitialCluster = m.initialCluster
	cfg.InitialClusterToken = "testetcd"
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if m.edit != nil {
		m.edit(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	var once sync.Once
	m.emb = e
	// Close panics when called twice.
	m.stop = func() { once.Do(e.Close) }
	return nil
}

func (m *member) startBinary(bin string) error {
	m.log = &testbin.SyncBuffer{}
	cmd := exec.Command(bin,
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", m.initialCluster,
		"--initial-cluster-token", "testetcd",
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--logger", "zap",
		"--log-level", "error",
	)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if runtime.GOARCH == "arm64" {
		// etcd 3.4 refuses to start on arm64 unless told it may.
		cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=arm64")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	m.cmd = cmd
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	return nil
}

func (m *member) kill() {
	m.mu.Lock()
	stop := m.stop
	m.stop, m.emb = nil, nil
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// logs returns the binary members' output, for a failing start.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		m.mu.Lock()
		if m.log != nil {
			fmt.Fprintf(&b, "\n--- %s (%s) ---\n%s", m.name, strconv.Quote(m.clientURL), m.log.String())
		}
		m.mu.Unlock()
	}
	return b.String()
}

// EnableAuth creates user root with password and turns authentication on,
// so a client must authenticate before any call.
func (c *Cluster) EnableAuth(ctx context.Context, password string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: startTimeout, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("testetcd: enable auth: %w", err)
	}
	defer cli.Close()
	if _, err := cli.UserAdd(ctx, "root", password); err != nil {
		return fmt.Errorf("testetcd: add user root: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("testetcd: grant root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("testetcd: auth enable: %w", err)
	}
	return nil
}
