// Package transporttest is the conformance suite every device transport
// runs against a real in-process server of its kind, behind a fault proxy
// that witnesses each connection and request at the device: the owner
// guard keeps requests off the wire, the owner context's end and Close
// close the connection within the close bound (a connect in flight
// included), and Open gives up within the activation bound. It also
// parses a kind's configuration for its tests (config.go).
package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Device is a transport that polls and writes.
type Device interface {
	transports.Poller
	Write(ctx context.Context, tag string, value any) error
}

// Bounds are a device's timeouts; zero means the kind's default.
type Bounds struct {
	Connect, Request, Close time.Duration
}

// Device returns the device configuration the suite's transports are
// built from: kind at addr with bounds b and one poll group "g" holding x,
// named "x" and writable.
func (b Bounds) Device(kind, addr string, x routes.Tag) *routes.Device {
	x.Name, x.Writable = "x", true
	return &routes.Device{Kind: kind, Address: addr,
		ConnectTimeout: routes.Duration(b.Connect), RequestTimeout: routes.Duration(b.Request), CloseTimeout: routes.Duration(b.Close),
		Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{&x}}}}
}

// Proxy starts a fault proxy in Pass mode in front of addr, closed when
// the test ends.
func Proxy(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	px, err := faultproxy.Start(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return px
}

// Kind is what the suite needs of a transport kind.
type Kind struct {
	// Server starts a real server of the kind for one test, stopped when
	// the test ends, and returns a fault proxy in Pass mode in front of it.
	Server func(t *testing.T) *faultproxy.Proxy
	// New builds an unopened transport reaching the server at addr (the
	// proxy's host:port) with bounds b and one poll group "g" holding one
	// writable tag "x".
	New func(t *testing.T, addr string, b Bounds) Device
	// Value is a value tag "x" accepts.
	Value any
	// Closed is the package's sentinel for a closed transport.
	Closed error
}

// wait is how long the suite waits for a condition the transport owes
// within a bound before it gives up; the bound itself is then checked.
const wait = 10 * time.Second

// Run runs the suite.
func Run(t *testing.T, k Kind) {
	t.Run("Guard", func(t *testing.T) { testGuard(t, k) })
	t.Run("OwnerCancel", func(t *testing.T) { testOwnerCancel(t, k) })
	t.Run("CloseWithinBound", func(t *testing.T) { testCloseWithinBound(t, k) })
	t.Run("CloseDuringConnect", func(t *testing.T) { testCloseDuringConnect(t, k) })
	t.Run("ActivationWithinBound", func(t *testing.T) { testActivationWithinBound(t, k) })
}

// Rig is a transport under test behind a fault proxy, with an owner
// context of its own. When the test ends the rig ends the owner context,
// closes the transport, and fails the test if the device ever saw two of
// its connections at once, unless HalfOpen excuses a partition that hid a
// close from the device.
type Rig[T Device] struct {
	Proxy    *faultproxy.Proxy
	Tr       T
	Owner    context.Context
	Stop     context.CancelFunc
	HalfOpen bool
}

// NewRig returns the rig of tr, which reaches its device through px.
func NewRig[T Device](t *testing.T, px *faultproxy.Proxy, tr T) *Rig[T] {
	owner, stop := context.WithCancel(context.Background())
	r := &Rig[T]{Proxy: px, Tr: tr, Owner: owner, Stop: stop}
	t.Cleanup(func() {
		stop()
		_ = tr.Close(context.Background())
		// The promise: the device never saw two connections from us.
		if peak := px.Peak(); peak > 1 && !r.HalfOpen {
			t.Errorf("the device saw %d concurrent connections, want at most 1", peak)
		}
	})
	return r
}

// Open opens the transport under the rig's owner context.
func (r *Rig[T]) Open(t *testing.T) {
	t.Helper()
	if err := r.Tr.Open(r.Owner); err != nil {
		t.Fatalf("Open: %v", err)
	}
}

// Poll polls group and returns its values by tag, failing t on error.
func (r *Rig[T]) Poll(t *testing.T, group string) map[string]transports.Value {
	t.Helper()
	return Poll(t, r.Tr, group)
}

// WaitConns waits until the device holds n connections; the proxy notices
// a close asynchronously, so a test waits here before it counts.
func (r *Rig[T]) WaitConns(t *testing.T, n int) {
	t.Helper()
	r.waitFor(t, fmt.Sprintf("%d connections", n), func(s faultproxy.Stats) bool { return s.Current == n })
}

type rig = Rig[Device]

func newRig(t *testing.T, k Kind, b Bounds) *rig {
	t.Helper()
	px := k.Server(t)
	return NewRig(t, px, k.New(t, px.Addr(), b))
}

// requests counts the requests that reached the device.
func (r *Rig[T]) requests() int64 {
	var n int64
	for _, c := range r.Proxy.Stats().Conns {
		n += c.Requests
	}
	return n
}

func (r *Rig[T]) waitFor(t *testing.T, what string, cond func(faultproxy.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := r.Proxy.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %+v", what, r.Proxy.Stats())
	}
}

// waitClosed waits until the device has seen every connection close and
// checks that took no longer than the close bound after start.
func (r *Rig[T]) waitClosed(t *testing.T, start time.Time, after string) {
	t.Helper()
	r.waitFor(t, "the connection to close after "+after, func(s faultproxy.Stats) bool { return s.Current == 0 })
	if took := time.Since(start); took > r.Tr.CloseBound() {
		t.Errorf("the connection closed %v after %s, beyond the close bound %v", took, after, r.Tr.CloseBound())
	}
}

// stuckPoll makes the device's replies vanish and starts a poll; it
// returns once the poll's request reached the device.
func (r *Rig[T]) stuckPoll(t *testing.T) <-chan error {
	t.Helper()
	if err := r.Proxy.SetMode(faultproxy.DropResponses); err != nil {
		t.Fatal(err)
	}
	sent := r.requests()
	done := make(chan error, 1)
	go func() {
		_, err := r.Tr.Poll(context.Background(), "g")
		done <- err
	}()
	r.waitFor(t, "the poll's request", func(faultproxy.Stats) bool { return r.requests() > sent })
	return done
}

func recv(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(wait):
		t.Fatalf("%s still running %v later", what, wait)
		return nil
	}
}

// testGuard: once the owner's guard refuses, no poll or write reaches the
// device.
func testGuard(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{})
	var fenced atomic.Bool
	r.Owner = transports.WithGuard(r.Owner, func() error {
		if fenced.Load() {
			return errors.New("past the fence deadline")
		}
		return nil
	})
	r.Open(t)
	if _, err := r.Tr.Poll(context.Background(), "g"); err != nil {
		t.Fatalf("poll before the fence: %v", err)
	}
	sent := r.requests()
	fenced.Store(true)
	vals, err := r.Tr.Poll(context.Background(), "g")
	if !errors.Is(err, transports.ErrGuard) {
		t.Errorf("poll past the fence: %v, want ErrGuard", err)
	}
	for _, v := range vals {
		if v.Quality != transports.Bad {
			t.Errorf("poll past the fence: tag %s has quality %s", v.Tag, v.Quality)
		}
	}
	if err := r.Tr.Write(context.Background(), "x", k.Value); !errors.Is(err, transports.ErrGuard) {
		t.Errorf("write past the fence: %v, want ErrGuard", err)
	}
	if got := r.requests(); got != sent {
		t.Errorf("%d requests reached the device past the fence", got-sent)
	}
}

// testOwnerCancel: ending the owner context with a request in flight
// closes the connection within the close bound, fails the request, and
// the transport never connects again.
func testOwnerCancel(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Request: 30 * time.Second, Close: 500 * time.Millisecond})
	r.Open(t)
	done := r.stuckPoll(t)
	start := time.Now()
	r.Stop()
	r.waitClosed(t, start, "the owner context ended")
	if err := recv(t, done, "the poll in flight"); err == nil {
		t.Error("the poll in flight succeeded after the owner context ended")
	}
	if _, err := r.Tr.Poll(context.Background(), "g"); !errors.Is(err, k.Closed) {
		t.Errorf("poll after the owner context ended: %v, want %v", err, k.Closed)
	}
	if err := r.Tr.Open(context.Background()); !errors.Is(err, k.Closed) {
		t.Errorf("Open after the owner context ended: %v, want %v", err, k.Closed)
	}
	if got := r.Proxy.Stats().Accepted; got != 1 {
		t.Errorf("%d connections; the transport reconnected after its owner context ended", got)
	}
	if st := r.Tr.State(); st.Converged || !errors.Is(st.Err, k.Closed) {
		t.Errorf("state after the owner context ended: %+v", st)
	}
}

// testCloseWithinBound: Close with a request in flight returns and
// closes the connection within the close bound; a second Close is fine.
func testCloseWithinBound(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Request: 30 * time.Second, Close: 500 * time.Millisecond})
	r.Open(t)
	done := r.stuckPoll(t)
	start := time.Now()
	if err := r.Tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > r.Tr.CloseBound() {
		t.Errorf("Close took %v, beyond its bound %v", took, r.Tr.CloseBound())
	}
	r.waitClosed(t, start, "Close")
	if err := recv(t, done, "the poll in flight"); !errors.Is(err, k.Closed) {
		t.Errorf("the poll in flight: %v, want %v", err, k.Closed)
	}
	if err := r.Tr.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if st := r.Tr.State(); st.Converged || !errors.Is(st.Err, k.Closed) {
		t.Errorf("state after Close: %+v", st)
	}
}

// testCloseDuringConnect: Close while the device is silent from the first
// byte of the connection (the transport is in its handshake, or for a
// protocol without one at its first request) ends Open at once and
// leaves no connection being made.
func testCloseDuringConnect(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Connect: 30 * time.Second, Request: 30 * time.Second, Close: 500 * time.Millisecond})
	if err := r.Proxy.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Tr.Open(r.Owner) }()
	r.waitFor(t, "the transport's first bytes", func(s faultproxy.Stats) bool {
		return len(s.Conns) == 1 && s.Conns[0].DroppedUp > 0
	})
	start := time.Now()
	if err := r.Tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "Open"); err == nil {
		t.Error("Open succeeded after Close")
	}
	r.waitClosed(t, start, "Close during connect")
	if got := r.Proxy.Stats().Accepted; got != 1 {
		t.Errorf("%d connections, want 1", got)
	}
}

// testActivationWithinBound: against a device that never answers, Open
// gives up within the activation bound it discloses to admission and
// keeps no connection.
func testActivationWithinBound(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Connect: 300 * time.Millisecond, Request: 200 * time.Millisecond})
	if err := r.Proxy.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := r.Tr.Open(r.Owner)
	if took := time.Since(start); took > r.Tr.ActivationBound() {
		t.Errorf("Open took %v, beyond its activation bound %v", took, r.Tr.ActivationBound())
	}
	if err == nil {
		t.Fatal("Open succeeded against a silent device")
	}
	if st := r.Tr.State(); st.Converged || st.Err == nil {
		t.Errorf("state after a failed Open: %+v", st)
	}
	r.waitFor(t, "the failed activation's connection to close", func(s faultproxy.Stats) bool { return s.Current == 0 })
}

// Poll polls group and returns its values by tag, failing t on error.
func Poll(t *testing.T, tr transports.Poller, group string) map[string]transports.Value {
	t.Helper()
	vals, err := tr.Poll(context.Background(), group)
	if err != nil {
		t.Fatalf("Poll %s: %v", group, err)
	}
	m := map[string]transports.Value{}
	for _, v := range vals {
		m[v.Tag] = v
	}
	return m
}

// MustGood fails t unless tag name is Good, stamped, and holds want with
// its Go type.
func MustGood(t *testing.T, vals map[string]transports.Value, name string, want any) {
	t.Helper()
	v, ok := vals[name]
	if !ok {
		t.Fatalf("tag %s missing", name)
	}
	if v.Quality != transports.Good || v.Err != nil || v.Timestamp.IsZero() {
		t.Fatalf("tag %s: quality %s, err %v, time %v", name, v.Quality, v.Err, v.Timestamp)
	}
	if fmt.Sprintf("%T %v", v.Value, v.Value) != fmt.Sprintf("%T %v", want, want) {
		t.Errorf("tag %s = %T %v, want %T %v", name, v.Value, v.Value, want, want)
	}
}
