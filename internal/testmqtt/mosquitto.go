package testmqtt

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/freeport"
)

// MosquittoBinary is the broker binary looked up on PATH (and in /usr/sbin,
// where Debian installs it, since /usr/sbin is not on every user's PATH).
const MosquittoBinary = "mosquitto"

// startTimeout bounds how long a mosquitto start may take before the test
// fails; it is a hang guard (a start takes ~30 ms here).
const startTimeout = 10 * time.Second

// MosquittoConfig selects a mosquitto variant.
type MosquittoConfig struct {
	// Users, when set, turns anonymous access off and writes a password
	// file with these user names and passwords.
	Users map[string]string
	// PKI, when set, makes the listener TLS with PKI's server certificate.
	PKI *PKI
	// RequireClientCert asks TLS clients for a certificate signed by PKI's CA.
	RequireClientCert bool
	// Persistence keeps sessions and queued messages across Stop and
	// Restart (in the broker's temporary directory).
	Persistence bool
	// MaxQueuedMessages is max_queued_messages, the messages the broker
	// queues per client beyond its in-flight window; 0 keeps mosquitto's
	// default (1000), -1 writes 0 (no limit).
	MaxQueuedMessages int
}

// Mosquitto is a running Debian mosquitto broker on 127.0.0.1.
type Mosquitto struct {
	// Addr is 127.0.0.1:port; URL is tcp:// or ssl:// Addr.
	Addr, URL string
	// Dir holds the configuration, password file, persistence and log.
	Dir string

	t    testing.TB
	bin  string
	conf string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// fallbackPaths are tried when mosquitto is not on PATH.
var fallbackPaths = []string{"/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"}

// LookMosquitto finds the binary; the test fails (never skips) when it is
// missing, because skipping would hide the missing coverage.
func LookMosquitto(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath(MosquittoBinary); err == nil {
		return p
	}
	for _, p := range fallbackPaths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("testmqtt: mosquitto binary not found on PATH or in /usr/sbin: install mosquitto (scripts/test does)")
	return ""
}

// StartMosquitto writes a configuration for cfg, starts mosquitto on a free
// port and waits until it accepts connections. It is killed in t.Cleanup.
func StartMosquitto(t testing.TB, cfg MosquittoConfig) *Mosquitto {
	t.Helper()
	m := &Mosquitto{t: t, bin: LookMosquitto(t), Dir: t.TempDir()}
	port := freePort(t)
	m.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	m.URL = "tcp://" + m.Addr
	if cfg.PKI != nil {
		m.URL = "ssl://" + m.Addr
	}

	var b strings.Builder
	fmt.Fprintf(&b, "listener %d 127.0.0.1\n", port)
	// As root mosquitto would drop to user mosquitto, which cannot read the
	// temporary directory; on other users the line is ignored.
	b.WriteString("user root\n")
	fmt.Fprintf(&b, "log_dest file %s\n", filepath.Join(m.Dir, "mosquitto.log"))
	b.WriteString("log_type error\nlog_type warning\nlog_type notice\nlog_type information\n")
	if cfg.Persistence {
		b.WriteString("persistence true\n")
		fmt.Fprintf(&b, "persistence_location %s/\n", m.Dir)
		// Save the database on every change: a kill must not lose it.
		b.WriteString("autosave_on_changes true\nautosave_interval 1\n")
	} else {
		b.WriteString("persistence false\n")
	}
	switch {
	case cfg.MaxQueuedMessages < 0:
		b.WriteString("max_queued_messages 0\n")
	case cfg.MaxQueuedMessages > 0:
		fmt.Fprintf(&b, "max_queued_messages %d\n", cfg.MaxQueuedMessages)
	}
	if len(cfg.Users) > 0 {
		pw := filepath.Join(m.Dir, "passwd")
		writePasswordFile(t, pw, cfg.Users)
		b.WriteString("allow_anonymous false\n")
		fmt.Fprintf(&b, "password_file %s\n", pw)
	} else {
		b.WriteString("allow_anonymous true\n")
	}
	if cfg.PKI != nil {
		fmt.Fprintf(&b, "cafile %s\ncertfile %s\nkeyfile %s\n", cfg.PKI.CAFile, cfg.PKI.ServerCert, cfg.PKI.ServerKey)
		if cfg.RequireClientCert {
			b.WriteString("require_certificate true\n")
		}
	}
	m.conf = filepath.Join(m.Dir, "mosquitto.conf")
	if err := os.WriteFile(m.conf, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(m.Kill)
	return m
}

func (m *Mosquitto) start() {
	m.t.Helper()
	cmd := exec.Command(m.bin, "-c", m.conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("testmqtt: start %s: %v", m.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", m.Addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(m.Dir, "mosquitto.log"))
			m.t.Fatalf("testmqtt: mosquitto exited at start: %s\n%s\n%s", cmd.ProcessState, out.String(), log)
		case <-ctx.Done():
			m.t.Fatalf("testmqtt: mosquitto on %s not accepting after %v: %v", m.Addr, startTimeout, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Stop ends the broker with SIGTERM (it saves persistence) and waits.
func (m *Mosquitto) Stop() { m.signal(syscall.SIGTERM) }

// Kill ends the broker with SIGKILL and waits; safe when already stopped.
func (m *Mosquitto) Kill() { m.signal(syscall.SIGKILL) }

func (m *Mosquitto) signal(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		m.t.Errorf("testmqtt: signal mosquitto pid %d: %v", cmd.Process.Pid, err)
	}
	select {
	case <-done:
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts the broker again on the same port with the same
// configuration (and persistence directory). It must be stopped first.
func (m *Mosquitto) Restart() {
	m.t.Helper()
	m.start()
}

// Log returns the broker's log so far.
func (m *Mosquitto) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "mosquitto.log"))
	return string(b)
}

// writePasswordFile writes mosquitto's salted SHA-512 format
// ("user:$6$salt$hash", hash = SHA-512(password || salt)), which mosquitto
// 2.0 requires, so no mosquitto_passwd binary is needed.
func writePasswordFile(t testing.TB, path string, users map[string]string) {
	t.Helper()
	var b strings.Builder
	for u, p := range users {
		salt := make([]byte, 12)
		if _, err := rand.Read(salt); err != nil {
			t.Fatal(err)
		}
		h := sha512.Sum512(append([]byte(p), salt...))
		fmt.Fprintf(&b, "%s:$6$%s$%s\n", u, base64.StdEncoding.EncodeToString(salt), base64.StdEncoding.EncodeToString(h[:]))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort asks the kernel for a free port. Another process could take it
// before mosquitto binds; start then fails loudly rather than silently.
func freePort(t testing.TB) int {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(addr)
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
