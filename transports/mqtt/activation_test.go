package mqtt

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/routes"
)

// hang guards every wait; it is never an assertion about speed.
const hang = 20 * time.Second

// Small phase timeouts so every stalled activation runs to its bound fast.
var (
	testConnect   = 300 * time.Millisecond
	testReconcile = 200 * time.Millisecond
	testGrace     = 150 * time.Millisecond
)

func testBroker(url string) routes.Broker {
	return routes.Broker{
		URL:              url,
		ClientID:         "lb-{session}",
		KeepAlive:        routes.Duration(time.Second),
		ConnectTimeout:   routes.Duration(testConnect),
		ReconcileTimeout: routes.Duration(testReconcile),
		UnmatchedGrace:   routes.Duration(testGrace),
		CloseTimeout:     routes.Duration(500 * time.Millisecond),
	}
}

func newClient(t *testing.T, b routes.Broker, session string) *Client {
	t.Helper()
	c, err := New("mqtt:test", Config{Broker: b, Session: session, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// projectBound is the bound admission discloses for the test timeouts.
func projectBound(t *testing.T) time.Duration {
	t.Helper()
	d, err := admission.MQTTActivationBound(testConnect, testReconcile, testGrace)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// open runs Open the way the lease manager does: under a deadline equal to
// the disclosed bound, and returns how long it took.
func open(t *testing.T, c *Client) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.ActivationBound())
	defer cancel()
	start := time.Now()
	err := c.Open(ctx)
	return time.Since(start), err
}

func nop(Message) {}

func TestActivationBoundIsAdmissions(t *testing.T) {
	c := newClient(t, testBroker("tcp://127.0.0.1:1"), "s")
	if c.ActivationBound() != projectBound(t) {
		t.Fatalf("client bound %v, admission %v", c.ActivationBound(), projectBound(t))
	}
	if b := testBroker("tcp://127.0.0.1:1"); c.CloseBound() != b.CloseTimeout.D() {
		t.Fatalf("client close bound %v, close_timeout %v", c.CloseBound(), b.CloseTimeout.D())
	}
	// Defaults: a zero configuration takes the routes defaults.
	d, err := New("mqtt:d", Config{Broker: routes.Broker{URL: "tcp://127.0.0.1:1883"}, Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := admission.MQTTActivationBound(routes.DefaultMQTTConnectTimeout, routes.DefaultMQTTReconcileTimeout, routes.DefaultMQTTUnmatchedGrace)
	if d.ActivationBound() != want || d.ClientID() != "leasebridge-s" || d.StatusTopic() != "leasebridge/s/status" {
		t.Fatalf("defaults: bound %v (want %v), client id %s, status %s", d.ActivationBound(), want, d.ClientID(), d.StatusTopic())
	}
}

// A broker whose CA or password file is missing, or whose password_env is
// unset, is not built, unless the configuration allows missing deployment
// inputs (admit away from the deployment): then it reports its bounds and
// Open fails with the missing input, before any connection.
func TestMissingInputsAllowedOnlyForBounds(t *testing.T) {
	missing := t.TempDir() + "/absent.pem"
	env := "LEASEBRIDGE_TEST_UNSET_PASSWORD"
	t.Setenv(env, "") // restored after the test
	os.Unsetenv(env)
	for name, edit := range map[string]func(*routes.Broker){
		"ca_file":       func(b *routes.Broker) { b.URL, b.TLS = "ssl://127.0.0.1:1", &routes.TLS{CAFile: missing} },
		"password_file": func(b *routes.Broker) { b.Username, b.PasswordFile = "u", missing },
		"password_env":  func(b *routes.Broker) { b.Username, b.PasswordEnv = "u", env },
	} {
		b := testBroker("tcp://127.0.0.1:1")
		edit(&b)
		if _, err := New("mqtt:x", Config{Broker: b, Session: "s"}); !routes.DeploymentInput(err) {
			t.Errorf("%s missing: New gave %v, want the missing input", name, err)
		}
		c, err := New("mqtt:x", Config{Broker: b, Session: "s", AllowMissingInputs: true})
		if err != nil {
			t.Fatalf("%s missing, allowed: %v", name, err)
		}
		if c.ActivationBound() != projectBound(t) || c.CloseBound() != b.CloseTimeout.D() {
			t.Errorf("%s missing: bounds %v/%v", name, c.ActivationBound(), c.CloseBound())
		}
		if err := c.Open(context.Background()); !routes.DeploymentInput(err) || c.ConnectAttempts() != 0 {
			t.Errorf("%s missing: Open gave %v after %d connect attempts, want the missing input and none", name, err, c.ConnectAttempts())
		}
	}
}

// Every stalled phase: Open fails within the bound admission computed,
// after exactly the connect attempts the recycle logic allows (3).
func TestActivationStalls(t *testing.T) {
	bound := projectBound(t)
	cases := []struct {
		name string
		// start returns the broker URL and a counter of TCP connections.
		start   func(t *testing.T) (string, func() int)
		subs    bool
		wantErr string
	}{
		{"connect never answered", func(t *testing.T) (string, func() int) {
			f := startFake(t, false, never, never)
			return f.url(), func() int { a, _, _ := f.counts(); return a }
		}, false, "connect not done within connect_timeout"},
		{"suback never sent", func(t *testing.T) (string, func() int) {
			f := startFake(t, true, never, 0)
			return f.url(), func() int { _, c, _ := f.counts(); return c }
		}, true, "reconcile not done"},
		{lastMomentCase, func(t *testing.T) (string, func() int) {
			// The worst case the bound is built for: every connect uses
			// nearly all of connect_timeout, every reconcile all of
			// reconcile_timeout, both graces in full.
			f := startFake(t, true, never, 0)
			f.connackAfter = testConnect - 30*time.Millisecond
			return f.url(), func() int { _, c, _ := f.counts(); return c }
		}, true, "reconcile"},
		{"status puback never sent", func(t *testing.T) (string, func() int) {
			f := startFake(t, true, 0, never)
			return f.url(), func() int { _, c, _ := f.counts(); return c }
		}, false, "reconcile not done"},
		{"blackholed broker", func(t *testing.T) (string, func() int) {
			m := testmqtt.StartMochi(t)
			p, err := faultproxy.Start(context.Background(), m.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			if err := p.SetMode(faultproxy.Blackhole); err != nil {
				t.Fatal(err)
			}
			return "tcp://" + p.Addr(), func() int { return p.Stats().Accepted }
		}, true, "connect not done within connect_timeout"},
		{"connection refused", func(t *testing.T) (string, func() int) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			return "tcp://" + addr, func() int { return 3 } // nothing to count at a closed port
		}, false, "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, conns := tc.start(t)
			c := newClient(t, testBroker(url), "stall")
			if tc.subs {
				if err := c.Subscribe(Subscription{Filter: "cmd/#", QoS: 1, Handler: nop}); err != nil {
					t.Fatal(err)
				}
			}
			took, err := open(t, c)
			// A CONNACK sent at the last moment can miss connect_timeout on a
			// loaded machine: then the connect phase ends activation, still
			// within the bound, which is what this test is about.
			phaseOK := strings.Contains(err.Error(), tc.wantErr) ||
				(tc.name == lastMomentCase && strings.Contains(err.Error(), "connect not done within connect_timeout"))
			if !errors.Is(err, ErrNotConverged) || !phaseOK || !strings.Contains(err.Error(), url) {
				t.Fatalf("Open: %v; want ErrNotConverged naming %s and %q", err, url, tc.wantErr)
			}
			if took > bound {
				t.Fatalf("activation took %v, over the disclosed bound %v", took, bound)
			}
			if c.ConnectAttempts() != 3 || conns() != 3 {
				t.Fatalf("connect attempts %d, broker saw %d; want 3 (initial + two recycles)", c.ConnectAttempts(), conns())
			}
			st := c.State()
			if st.Converged || st.Err == nil {
				t.Fatalf("state after failed Open: %+v", st)
			}
			t.Logf("%s: activation gave up after %v (bound %v), 3 attempts", tc.name, took, bound)
		})
	}
}

// A SUBACK later than reconcile_timeout but within unmatched_grace is
// matched: one connect, converged.
func TestActivationLateSubackWithinGrace(t *testing.T) {
	f := startFake(t, true, testReconcile+testGrace/3, 0)
	c := newClient(t, testBroker(f.url()), "late")
	if err := c.Subscribe(Subscription{Filter: "cmd/x", QoS: 1, Handler: nop}); err != nil {
		t.Fatal(err)
	}
	took, err := open(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if took > projectBound(t) {
		t.Fatalf("took %v over bound %v", took, projectBound(t))
	}
	if _, connects, subs := f.counts(); connects != 1 || subs != 1 || c.ConnectAttempts() != 1 {
		t.Fatalf("connects %d subscribes %d attempts %d; want 1 each", connects, subs, c.ConnectAttempts())
	}
	if !c.State().Converged {
		t.Fatalf("state %+v", c.State())
	}
}

// A SUBACK later than reconcile + grace on every connection: recycled
// twice, still within the bound.
const lastMomentCase = "connack at the last moment, suback never"

func TestActivationSubackBeyondGrace(t *testing.T) {
	f := startFake(t, true, testReconcile+testGrace+testGrace, 0)
	c := newClient(t, testBroker(f.url()), "later")
	if err := c.Subscribe(Subscription{Filter: "cmd/x", QoS: 1, Handler: nop}); err != nil {
		t.Fatal(err)
	}
	took, err := open(t, c)
	if !errors.Is(err, ErrNotConverged) {
		t.Fatalf("Open: %v", err)
	}
	if took > projectBound(t) || c.ConnectAttempts() != 3 {
		t.Fatalf("took %v (bound %v), %d attempts", took, projectBound(t), c.ConnectAttempts())
	}
}

// The caller's deadline, when earlier than the bound, wins.
func TestActivationHonoursCallerDeadline(t *testing.T) {
	f := startFake(t, false, never, never)
	c := newClient(t, testBroker(f.url()), "early")
	limit := testConnect + testGrace/2
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	err := c.Open(ctx)
	took := time.Since(start)
	// The caller's deadline ends Open during the grace after the first
	// failed connect; on a loaded machine the connect's own timeout may be
	// what is reported, but Open must still return by the deadline.
	if !errors.Is(err, ErrNotConverged) {
		t.Fatalf("Open: %v", err)
	}
	if took > limit || c.ConnectAttempts() != 1 {
		t.Fatalf("took %v over caller deadline %v, %d attempts", took, limit, c.ConnectAttempts())
	}
}

func TestConfigErrors(t *testing.T) {
	b := testBroker("tcp://127.0.0.1:1883")
	b.ProtocolVersion = 5
	if _, err := New("x", Config{Broker: b}); !errors.Is(err, ErrMQTT5) || !strings.Contains(err.Error(), "paho") {
		t.Fatalf("protocol 5: %v", err)
	}
	for name, mut := range map[string]func(*routes.Broker){
		"bad url":       func(b *routes.Broker) { b.URL = "127.0.0.1:1883" },
		"bad scheme":    func(b *routes.Broker) { b.URL = "http://127.0.0.1:1883" },
		"protocol 7":    func(b *routes.Broker) { b.ProtocolVersion = 7 },
		"keepalive 1.5": func(b *routes.Broker) { b.KeepAlive = routes.Duration(1500 * time.Millisecond) },
		"tls on tcp":    func(b *routes.Broker) { b.TLS = &routes.TLS{} },
		"env unset":     func(b *routes.Broker) { b.PasswordEnv = "LEASEBRIDGE_TEST_UNSET_VARIABLE" },
		"no file":       func(b *routes.Broker) { b.PasswordFile = "/nonexistent/pw" },
		"ca missing": func(b *routes.Broker) {
			b.URL = "ssl://127.0.0.1:8883"
			b.TLS = &routes.TLS{CAFile: "/nonexistent/ca.pem"}
		},
	} {
		b := testBroker("tcp://127.0.0.1:1883")
		mut(&b)
		if _, err := New("x", Config{Broker: b}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// A SUBACK failure code (an ACL denial) is not going to change: activation
// stops at once and names the topic.
func TestActivationSubscriptionRejected(t *testing.T) {
	f := startFake(t, true, 0, 0)
	f.rejectSubs = true
	c := newClient(t, testBroker(f.url()), "acl")
	if err := c.Subscribe(Subscription{Filter: "secret/#", QoS: 1, Handler: nop}); err != nil {
		t.Fatal(err)
	}
	_, err := open(t, c)
	if !errors.Is(err, ErrSubscriptionRejected) || !strings.Contains(err.Error(), "secret/#") {
		t.Fatalf("Open: %v", err)
	}
	if c.ConnectAttempts() != 1 {
		t.Fatalf("%d connect attempts after a rejection, want 1", c.ConnectAttempts())
	}
}

// stalledBehindProxy is a broker that never answers CONNECT, reached
// through a fault proxy that counts the client's sockets.
func stalledBehindProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	f := startFake(t, false, never, never)
	p, err := faultproxy.Start(context.Background(), f.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func noSocketsLeft(t *testing.T, p *faultproxy.Proxy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := p.WaitFor(ctx, func(s faultproxy.Stats) bool { return s.Current == 0 && s.Accepted >= 1 }); err != nil {
		t.Fatalf("sockets left after the activation ended: %v", err)
	}
}

// Cancelling the caller's context abandons the activation and closes what
// it opened.
func TestActivationCancelled(t *testing.T) {
	p := stalledBehindProxy(t)
	c := newClient(t, testBroker("tcp://"+p.Addr()), "cancel")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the connect is under way.
		wctx, wcancel := context.WithTimeout(context.Background(), hang)
		defer wcancel()
		_ = p.WaitFor(wctx, func(s faultproxy.Stats) bool { return s.Current == 1 })
		cancel()
	}()
	err := c.Open(ctx)
	if !errors.Is(err, context.Canceled) || c.ConnectAttempts() != 1 {
		t.Fatalf("Open: %v after %d attempts", err, c.ConnectAttempts())
	}
	noSocketsLeft(t, p)
	if c.State().Converged {
		t.Fatal("converged after a cancelled Open")
	}
}

// Close while Open is still activating ends both within their bounds and
// leaves no socket.
func TestCloseDuringOpen(t *testing.T) {
	p := stalledBehindProxy(t)
	c := newClient(t, testBroker("tcp://"+p.Addr()), "race")
	opened := make(chan error, 1)
	go func() { _, err := open(t, c); opened <- err }()
	wctx, wcancel := context.WithTimeout(context.Background(), hang)
	defer wcancel()
	if err := p.WaitFor(wctx, func(s faultproxy.Stats) bool { return s.Current == 1 }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > c.CloseBound() {
		t.Fatalf("Close during Open took %v, bound %v", took, c.CloseBound())
	}
	select {
	case err := <-opened:
		if err == nil {
			t.Fatal("Open succeeded against a broker that never answers")
		}
	case <-time.After(hang):
		t.Fatal("Open did not return after Close")
	}
	noSocketsLeft(t, p)
	// The client can be opened again (next ownership); a cancelled context
	// keeps this attempt short.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Open(done); errors.Is(err, ErrOpen) || !errors.Is(err, context.Canceled) {
		t.Fatalf("reopen after Close: %v", err)
	}
}
