// Package testmqtt starts MQTT brokers for tests: an embedded mochi-mqtt
// broker with a connected-client counter, and the Debian mosquitto binary
// with throw-away configurations (anonymous, password, TLS), plus generated
// certificates. Every broker is stopped in t.Cleanup.
package testmqtt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Mochi is an embedded mochi-mqtt broker on 127.0.0.1 and a free port.
type Mochi struct {
	// Server is the broker; its inline client can publish and subscribe.
	Server *mochi.Server
	// Addr is 127.0.0.1:port and URL is tcp://Addr.
	Addr, URL string

	counter *counterHook
}

// StartMochi starts an embedded broker that allows every client.
func StartMochi(t testing.TB) *Mochi {
	t.Helper()
	return startMochi(t, false)
}

// StartMochiWebsocket starts an embedded broker speaking MQTT over
// WebSocket; URL is ws://Addr. (Debian's mosquitto 2.0.11 cannot open a
// websockets listener in this environment, so this is the WebSocket peer.)
func StartMochiWebsocket(t testing.TB) *Mochi {
	t.Helper()
	return startMochi(t, true)
}

func startMochi(t testing.TB, websocket bool) *Mochi {
	t.Helper()
	s := mochi.New(&mochi.Options{
		InlineClient: true,
		// Quiet: the broker logs every connect at info level.
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatalf("testmqtt: mochi allow hook: %v", err)
	}
	ch := &counterHook{open: map[*mochi.Client]bool{}, changed: make(chan struct{})}
	if err := s.AddHook(ch, nil); err != nil {
		t.Fatalf("testmqtt: mochi counter hook: %v", err)
	}
	var ln listeners.Listener
	if websocket {
		// The WebSocket listener cannot report a port it chose itself.
		ln = listeners.NewWebsocket(listeners.Config{ID: "ws", Address: fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	} else {
		ln = listeners.NewTCP(listeners.Config{ID: "tcp", Address: "127.0.0.1:0"})
	}
	if err := s.AddListener(ln); err != nil {
		t.Fatalf("testmqtt: mochi listener: %v", err)
	}
	if err := s.Serve(); err != nil {
		t.Fatalf("testmqtt: mochi serve: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m := &Mochi{Server: s, Addr: ln.Address(), counter: ch}
	m.URL = "tcp://" + m.Addr
	if websocket {
		m.URL = "ws://" + m.Addr
		waitListening(t, m.Addr)
	}
	return m
}

// waitListening waits until addr accepts a TCP connection.
func waitListening(t testing.TB, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testmqtt: nothing listening on %s after %v: %v", addr, startTimeout, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Connected is the number of clients connected now (the inline client is
// not counted).
func (m *Mochi) Connected() int {
	m.counter.mu.Lock()
	defer m.counter.mu.Unlock()
	return len(m.counter.open)
}

// PeakConnected is the highest number of clients ever connected at once.
func (m *Mochi) PeakConnected() int {
	m.counter.mu.Lock()
	defer m.counter.mu.Unlock()
	return m.counter.peak
}

// Sessions counts every session established since start.
func (m *Mochi) Sessions() int {
	m.counter.mu.Lock()
	defer m.counter.mu.Unlock()
	return m.counter.total
}

// ConnectedIDs lists the client ids connected now.
func (m *Mochi) ConnectedIDs() []string {
	m.counter.mu.Lock()
	defer m.counter.mu.Unlock()
	var ids []string
	for cl := range m.counter.open {
		ids = append(ids, cl.ID)
	}
	return ids
}

// WaitConnected blocks until cond holds for the number of connected
// clients or ctx ends.
func (m *Mochi) WaitConnected(ctx context.Context, cond func(n int) bool) error {
	for {
		m.counter.mu.Lock()
		n, changed := len(m.counter.open), m.counter.changed
		m.counter.mu.Unlock()
		if cond(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testmqtt: mochi %s has %d clients: %w", m.Addr, n, ctx.Err())
		case <-changed:
		}
	}
}

// counterHook counts established sessions; keyed by client so a takeover
// (same client id) is counted as one leaving and one arriving.
type counterHook struct {
	mochi.HookBase
	mu      sync.Mutex
	open    map[*mochi.Client]bool
	peak    int
	total   int
	changed chan struct{}
}

func (h *counterHook) ID() string { return "testmqtt-counter" }

func (h *counterHook) Provides(b byte) bool {
	return b == mochi.OnSessionEstablished || b == mochi.OnDisconnect
}

func (h *counterHook) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open[cl] = true
	h.total++
	h.peak = max(h.peak, len(h.open))
	h.notify()
}

func (h *counterHook) OnDisconnect(cl *mochi.Client, _ error, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[cl] {
		delete(h.open, cl)
		h.notify()
	}
}

func (h *counterHook) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}
