package mqtt

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

func waitState(t *testing.T, c *Client, what string, cond func(transports.State) bool) transports.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	st, err := c.WaitState(ctx, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return st
}

func converged(s transports.State) bool    { return s.Converged }
func notConverged(s transports.State) bool { return !s.Converged }

// watcher is a plain paho client recording what arrives on a filter.
type watcher struct {
	mu   sync.Mutex
	msgs []paho.Message
	ch   chan struct{}
}

func watch(t *testing.T, url, id, filter string, qos byte, clean bool) *watcher {
	t.Helper()
	w := &watcher{ch: make(chan struct{}, 1)}
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetProtocolVersion(4).
		SetCleanSession(clean).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(100 * time.Millisecond).SetMaxReconnectInterval(200 * time.Millisecond).
		SetKeepAlive(2 * time.Second)
	subscribed := make(chan struct{}, 1)
	sub := func(c paho.Client) {
		c.Subscribe(filter, qos, func(_ paho.Client, m paho.Message) {
			w.mu.Lock()
			w.msgs = append(w.msgs, m)
			w.mu.Unlock()
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}).Wait()
		select {
		case subscribed <- struct{}{}:
		default:
		}
	}
	o.SetOnConnectHandler(sub)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(hang) || tok.Error() != nil {
		t.Fatalf("watcher connect %s: %v", url, tok.Error())
	}
	// The subscription is made in the connect handler; wait for its SUBACK
	// so nothing published after watch returns is missed.
	select {
	case <-subscribed:
	case <-time.After(hang):
		t.Fatalf("watcher on %s never subscribed to %s", url, filter)
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return w
}

// waitFor waits until cond holds for the messages so far.
func (w *watcher) waitFor(t *testing.T, what string, cond func([]paho.Message) bool) []paho.Message {
	t.Helper()
	deadline := time.After(hang)
	for {
		w.mu.Lock()
		ms := append([]paho.Message(nil), w.msgs...)
		w.mu.Unlock()
		if cond(ms) {
			return ms
		}
		select {
		case <-w.ch:
		case <-deadline:
			t.Fatalf("waiting for %s: have %d messages", what, len(ms))
		}
	}
}

func lastStatus(t *testing.T, ms []paho.Message) StatusMessage {
	t.Helper()
	var s StatusMessage
	if len(ms) == 0 {
		return s
	}
	if err := json.Unmarshal(ms[len(ms)-1].Payload(), &s); err != nil {
		t.Fatalf("status payload %q: %v", ms[len(ms)-1].Payload(), err)
	}
	return s
}

func statusIs(t *testing.T, state string, epoch uint64) func([]paho.Message) bool {
	return func(ms []paho.Message) bool {
		s := lastStatus(t, ms)
		return s.State == state && s.Epoch == epoch
	}
}

// A silent cut (blackhole) is reported as not converged within the
// keepalive detection bound; the Client reconverges by itself once the
// path is back, and the instants move at each transition.
func TestConvergenceOnCut(t *testing.T) {
	m := testmqtt.StartMochi(t)
	p, err := faultproxy.Start(context.Background(), m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := newClient(t, testBroker("tcp://"+p.Addr()), "cut")
	if err := c.Subscribe(Subscription{Filter: "cmd/#", QoS: 1, Handler: nop}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	up := c.State()
	if !up.Converged || up.Since.Before(before) {
		t.Fatalf("after Open: %+v", up)
	}

	cut := time.Now()
	if err := p.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	down := waitState(t, c, "not converged after the cut", notConverged)
	detected := down.Since.Sub(cut)
	if down.Since.Before(cut) || detected > c.DetectionBound() {
		t.Fatalf("cut reported %v after it, detection bound %v (keepalive 1s)", detected, c.DetectionBound())
	}
	if !errors.Is(down.Err, ErrNotConnected) {
		t.Fatalf("not-converged reason: %v", down.Err)
	}
	t.Logf("blackhole detected after %v (bound %v)", detected, c.DetectionBound())

	healed := time.Now()
	if err := p.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	again := waitState(t, c, "converged after healing", converged)
	if !again.Since.After(healed) || c.ConnectAttempts() < 2 {
		t.Fatalf("reconverged %+v (healed at %v), attempts %d", again, healed, c.ConnectAttempts())
	}
	if err := c.Publish(context.Background(), "x/y", 1, false, []byte("1")); err != nil {
		t.Fatalf("publish after reconverging: %v", err)
	}
}

// Broker kill and restart (mosquitto): the loss is reported at once (the
// socket is reset, no keepalive needed), and the Client reconnects and
// resubscribes by itself.
func TestBrokerKillAndRestart(t *testing.T) {
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	got := make(chan string, 16)
	c := newClient(t, testBroker(mq.URL), "kill")
	if err := c.Subscribe(Subscription{Filter: "cmd/#", QoS: 1, Handler: func(m Message) { got <- string(m.Payload) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	mq.Kill()
	down := waitState(t, c, "not converged after kill", notConverged)
	if down.Since.Before(killed) || down.Since.Sub(killed) > c.DetectionBound() {
		t.Fatalf("kill reported at %v after it (bound %v)", down.Since.Sub(killed), c.DetectionBound())
	}
	mq.Restart()
	up := waitState(t, c, "converged after restart", converged)
	if !up.Since.After(down.Since) {
		t.Fatalf("instants: down %v up %v", down.Since, up.Since)
	}
	// The subscription is back: the restarted broker had no session.
	pub := newClient(t, testBroker(mq.URL), "kill-pub")
	if _, err := open(t, pub); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), "cmd/a", 1, false, []byte("after restart")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "after restart" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(hang):
		t.Fatal("subscription not restored after the broker restart")
	}
	t.Logf("kill detected after %v; reconverged %v after the loss; %d connect attempts", down.Since.Sub(killed), up.Since.Sub(down.Since), c.ConnectAttempts())
}

// The status topic carries owner and epoch, retained; the last will says
// "lost" when the owner vanishes; an orderly Close says "released".
// (mosquitto: mochi v2.7.9 reads a topic's retained path unlocked while a
// subscription scans it, a data race the race detector reports.)
func TestStatusTopicAndWill(t *testing.T) {
	m := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	p, err := faultproxy.Start(context.Background(), m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := newClient(t, testBroker("tcp://"+p.Addr()), "press-1")
	w := watch(t, m.URL, "watcher", c.StatusTopic(), 1, true)

	c.SetIdentity(Identity{Owner: "n1-aaaa", Epoch: 7})
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	ms := w.waitFor(t, "active status", statusIs(t, StateActive, 7))
	if s := lastStatus(t, ms); s.Owner != "n1-aaaa" || s.Session != "press-1" || s.Node != "n1" || s.ServiceLevelFull || s.Timestamp == 0 {
		t.Fatalf("status %+v", s)
	}
	if err := c.PublishStatus(context.Background(), StateServing, true); err != nil {
		t.Fatal(err)
	}
	ms = w.waitFor(t, "serving status", statusIs(t, StateServing, 7))
	if !lastStatus(t, ms).ServiceLevelFull {
		t.Fatal("serving without service_level_full")
	}

	// The owner vanishes without a DISCONNECT (the path resets, as when
	// its process dies): the broker publishes the will.
	if err := p.SetMode(faultproxy.Reset); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, "will", statusIs(t, StateLost, 7))
	waitState(t, c, "not converged after the reset", notConverged)
	// The path comes back: the client reconnects by itself and says again
	// what it said last, serving, not merely active.
	if err := p.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	ms = w.waitFor(t, "serving again", statusIs(t, StateServing, 7))
	if !lastStatus(t, ms).ServiceLevelFull {
		t.Fatal("serving after the reconnect without service_level_full")
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, "released", statusIs(t, StateReleased, 7))
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := p.WaitFor(ctx, func(s faultproxy.Stats) bool { return s.Current == 0 }); err != nil {
		t.Fatalf("a connection of the closed client is left: %v", err)
	}

	// Next ownership, next epoch; the retained status is what a late
	// subscriber sees.
	c.SetIdentity(Identity{Owner: "n1-bbbb", Epoch: 8})
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	late := watch(t, m.URL, "late", c.StatusTopic(), 1, true)
	lms := late.waitFor(t, "retained", statusIs(t, StateActive, 8))
	if s := lastStatus(t, lms); !lms[0].Retained() || s.Owner != "n1-bbbb" {
		t.Fatalf("retained status %+v", s)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, "released", statusIs(t, StateReleased, 8))
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Publishes at QoS 0, 1 and 2 arrive with the epoch in the payload; the
// retained last value is what a new subscriber gets. (mosquitto, for the
// reason given at TestStatusTopicAndWill.)
func TestPublishQoSAndRetain(t *testing.T) {
	m := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	c := newClient(t, testBroker(m.URL), "pub")
	c.SetIdentity(Identity{Owner: "o", Epoch: 3})
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	w := watch(t, m.URL, "w", "v/#", 2, true)
	ts := time.UnixMilli(1764556800123)
	for q := byte(0); q <= 2; q++ {
		v := transports.Value{Tag: "temp", Value: float64(q) + 0.5, Quality: transports.Good, Timestamp: ts}
		if err := c.PublishValue(context.Background(), "v/temp", q, true, v); err != nil {
			t.Fatalf("qos %d: %v", q, err)
		}
	}
	ms := w.waitFor(t, "three values", func(ms []paho.Message) bool { return len(ms) >= 3 })
	if len(ms) != 3 {
		for _, m := range ms {
			t.Logf("got %s %q qos %d retained %v dup %v", m.Topic(), m.Payload(), m.Qos(), m.Retained(), m.Duplicate())
		}
		t.Fatalf("%d messages, want 3", len(ms))
	}
	for i, msg := range ms {
		var vm ValueMessage
		if err := json.Unmarshal(msg.Payload(), &vm); err != nil {
			t.Fatal(err)
		}
		if vm.Epoch != 3 || vm.Value != float64(i)+0.5 || vm.Quality != "good" || vm.Timestamp != 1764556800123 || msg.Qos() != byte(i) {
			t.Fatalf("message %d: %+v qos %d", i, vm, msg.Qos())
		}
	}
	late := watch(t, m.URL, "late", "v/temp", 1, true)
	lm := late.waitFor(t, "retained", func(ms []paho.Message) bool { return len(ms) == 1 })
	if !lm[0].Retained() || !strings.Contains(string(lm[0].Payload()), `"value":2.5`) {
		t.Fatalf("retained %q retained=%v", lm[0].Payload(), lm[0].Retained())
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(context.Background(), "v/x", 1, false, nil); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("publish after Close: %v", err)
	}
}

// Close keeps its bound even when the broker path is blackholed (the
// released status cannot be acknowledged), and leaves no socket open.
func TestCloseBoundWhenBlackholed(t *testing.T) {
	m := testmqtt.StartMochi(t)
	p, err := faultproxy.Start(context.Background(), m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := newClient(t, testBroker("tcp://"+p.Addr()), "close")
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Close(context.Background())
	took := time.Since(start)
	if took > c.CloseBound() {
		t.Fatalf("Close took %v, over its bound %v", took, c.CloseBound())
	}
	if err == nil || !strings.Contains(err.Error(), "released status") {
		t.Fatalf("Close on a blackholed path: %v, want the unacknowledged status named", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := p.WaitFor(ctx, func(s faultproxy.Stats) bool { return s.Current == 0 }); err != nil {
		t.Fatalf("socket left open after Close: %v", err)
	}
	t.Logf("Close on a blackholed path took %v (bound %v)", took, c.CloseBound())
}

// The owner context's deadline bounds Open only; the connection outlives it.
func TestDeadlineBoundsOpenOnly(t *testing.T) {
	m := testmqtt.StartMochi(t)
	c := newClient(t, testBroker(m.URL), "dl")
	ctx, cancel := context.WithTimeout(context.Background(), c.ActivationBound())
	defer cancel()
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if !c.State().Converged {
		t.Fatalf("state after the activation deadline passed: %+v", c.State())
	}
	if err := c.Publish(context.Background(), "x", 1, false, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := c.Open(context.Background()); !errors.Is(err, ErrOpen) {
		t.Fatalf("second Open: %v", err)
	}
}

// Username and password from a file or the environment; bad credentials
// fail at once with a clear error, without recycling.
func TestCredentials(t *testing.T) {
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{Users: map[string]string{"bridge": "correct horse"}})
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("correct horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := testBroker(mq.URL)
	b.Username, b.PasswordFile = "bridge", pw
	if _, err := open(t, newClient(t, b, "file")); err != nil {
		t.Fatalf("password_file: %v", err)
	}
	t.Setenv("LB_TEST_MQTT_PW", "correct horse")
	b = testBroker(mq.URL)
	b.Username, b.PasswordEnv = "bridge", "LB_TEST_MQTT_PW"
	if _, err := open(t, newClient(t, b, "env")); err != nil {
		t.Fatalf("password_env: %v", err)
	}

	t.Setenv("LB_TEST_MQTT_PW", "wrong")
	bad := newClient(t, b, "bad")
	took, err := open(t, bad)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), mq.URL) || !strings.Contains(err.Error(), `user "bridge"`) ||
		!strings.Contains(strings.ToLower(err.Error()), "not authori") {
		t.Fatalf("bad password: %v", err)
	}
	if bad.ConnectAttempts() != 1 || took > bad.ActivationBound() {
		t.Fatalf("bad password: %d attempts in %v; want 1, no recycle", bad.ConnectAttempts(), took)
	}
	t.Logf("bad credentials: %v", err)
}

// TLS with generated certificates: CA and client certificate work; an
// unrelated CA fails naming the certificate problem.
func TestTLS(t *testing.T) {
	pki := testmqtt.NewPKI(t)
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{PKI: pki, RequireClientCert: true})
	b := testBroker(mq.URL)
	b.TLS = &routes.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	c := newClient(t, b, "tls")
	if _, err := open(t, c); err != nil {
		t.Fatalf("TLS with client certificate: %v", err)
	}
	if err := c.Publish(context.Background(), "t", 1, false, []byte("x")); err != nil {
		t.Fatal(err)
	}

	b.TLS = &routes.TLS{CAFile: pki.OtherCAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	bad := newClient(t, b, "tls-bad-ca")
	_, err := open(t, bad)
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), mq.URL) || bad.ConnectAttempts() != 1 {
		t.Fatalf("unrelated CA: %v after %d attempts; want ErrTLS at once", err, bad.ConnectAttempts())
	}
	t.Logf("unrelated CA: %v", err)
	b.TLS = &routes.TLS{CAFile: pki.CAFile}
	_, err = open(t, newClient(t, b, "tls-no-cert"))
	// Under TLS 1.3 the broker's alert can lose the race against our
	// CONNECT, which then meets a reset instead: ErrTLS when the alert is
	// read, a failed activation either way.
	if !errors.Is(err, ErrTLS) && !errors.Is(err, ErrNotConverged) {
		t.Fatalf("no client certificate: %v", err)
	}
	t.Logf("no client certificate: %v", err)
}

// MQTT 3.1 (protocol_version 3) against mosquitto.
func TestProtocolVersion3(t *testing.T) {
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
	b := testBroker(mq.URL)
	b.ProtocolVersion = 3
	c := newClient(t, b, "v31")
	got := make(chan string, 1)
	if err := c.Subscribe(Subscription{Filter: "v31/#", QoS: 2, Handler: func(m Message) { got <- string(m.Payload) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(context.Background(), "v31/x", 2, false, []byte("three-one")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "three-one" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(hang):
		t.Fatal("no message over MQTT 3.1")
	}
	// And it really was 3.1 on the wire (protocol level 3; 3.1.1 is 4).
	f := startFake(t, true, 0, 0)
	fb := testBroker(f.url())
	fb.ProtocolVersion = 3
	if _, err := open(t, newClient(t, fb, "v31-wire")); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.protocolLevels) != 1 || f.protocolLevels[0] != 3 {
		t.Fatalf("CONNECT protocol levels %v, want [3]", f.protocolLevels)
	}
}

// MQTT over WebSocket (ws://) goes through the same bounded activation.
func TestWebsocket(t *testing.T) {
	m := testmqtt.StartMochiWebsocket(t)
	got := make(chan string, 1)
	c := newClient(t, testBroker(m.URL), "ws")
	if err := c.Subscribe(Subscription{Filter: "ws/#", QoS: 1, Handler: func(msg Message) { got <- string(msg.Payload) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, c); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(context.Background(), "ws/a", 1, false, []byte("over websocket")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "over websocket" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(hang):
		t.Fatal("no message over ws://")
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := m.WaitConnected(ctx, func(n int) bool { return n == 0 }); err != nil {
		t.Fatalf("websocket connection left after Close: %v", err)
	}
}
