// Package transporttest is the conformance suite every device transport
// runs against a real in-process server of its kind, behind a fault proxy
// that witnesses each connection and request at the device: the owner
// guard keeps requests off the wire, the owner context's end and Close
// close the connection within the close bound (a connect in flight
// included), and Open gives up within the activation bound.
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

// rig is one transport behind the proxy, opened under owner.
type rig struct {
	px    *faultproxy.Proxy
	tr    Device
	owner context.Context
	stop  context.CancelFunc
}

func newRig(t *testing.T, k Kind, b Bounds) *rig {
	t.Helper()
	px := k.Server(t)
	tr := k.New(t, px.Addr(), b)
	owner, stop := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stop()
		_ = tr.Close(context.Background())
		// The promise: the device never saw two connections from us.
		if peak := px.Peak(); peak > 1 {
			t.Errorf("the device saw %d concurrent connections, want at most 1", peak)
		}
	})
	return &rig{px: px, tr: tr, owner: owner, stop: stop}
}

// requests counts the requests that reached the device.
func (r *rig) requests() int64 {
	var n int64
	for _, c := range r.px.Stats().Conns {
		n += c.Requests
	}
	return n
}

func (r *rig) waitFor(t *testing.T, what string, cond func(faultproxy.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := r.px.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %+v", what, r.px.Stats())
	}
}

// waitClosed waits until the device has seen every connection close and
// checks that took no longer than the close bound after start.
func (r *rig) waitClosed(t *testing.T, start time.Time, after string) {
	t.Helper()
	r.waitFor(t, "the connection to close after "+after, func(s faultproxy.Stats) bool { return s.Current == 0 })
	if took := time.Since(start); took > r.tr.CloseBound() {
		t.Errorf("the connection closed %v after %s, beyond the close bound %v", took, after, r.tr.CloseBound())
	}
}

func (r *rig) open(t *testing.T) {
	t.Helper()
	if err := r.tr.Open(r.owner); err != nil {
		t.Fatalf("Open: %v", err)
	}
}

// stuckPoll makes the device's replies vanish and starts a poll; it
// returns once the poll's request reached the device.
func (r *rig) stuckPoll(t *testing.T) <-chan error {
	t.Helper()
	if err := r.px.SetMode(faultproxy.DropResponses); err != nil {
		t.Fatal(err)
	}
	sent := r.requests()
	done := make(chan error, 1)
	go func() {
		_, err := r.tr.Poll(context.Background(), "g")
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
	r.owner = transports.WithGuard(r.owner, func() error {
		if fenced.Load() {
			return errors.New("past the fence deadline")
		}
		return nil
	})
	r.open(t)
	if _, err := r.tr.Poll(context.Background(), "g"); err != nil {
		t.Fatalf("poll before the fence: %v", err)
	}
	sent := r.requests()
	fenced.Store(true)
	vals, err := r.tr.Poll(context.Background(), "g")
	if !errors.Is(err, transports.ErrGuard) {
		t.Errorf("poll past the fence: %v, want ErrGuard", err)
	}
	for _, v := range vals {
		if v.Quality != transports.Bad {
			t.Errorf("poll past the fence: tag %s has quality %s", v.Tag, v.Quality)
		}
	}
	if err := r.tr.Write(context.Background(), "x", k.Value); !errors.Is(err, transports.ErrGuard) {
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
	r.open(t)
	done := r.stuckPoll(t)
	start := time.Now()
	r.stop()
	r.waitClosed(t, start, "the owner context ended")
	if err := recv(t, done, "the poll in flight"); err == nil {
		t.Error("the poll in flight succeeded after the owner context ended")
	}
	if _, err := r.tr.Poll(context.Background(), "g"); !errors.Is(err, k.Closed) {
		t.Errorf("poll after the owner context ended: %v, want %v", err, k.Closed)
	}
	if err := r.tr.Open(context.Background()); !errors.Is(err, k.Closed) {
		t.Errorf("Open after the owner context ended: %v, want %v", err, k.Closed)
	}
	if got := r.px.Stats().Accepted; got != 1 {
		t.Errorf("%d connections; the transport reconnected after its owner context ended", got)
	}
	if st := r.tr.State(); st.Converged || !errors.Is(st.Err, k.Closed) {
		t.Errorf("state after the owner context ended: %+v", st)
	}
}

// testCloseWithinBound: Close with a request in flight returns and
// closes the connection within the close bound; a second Close is fine.
func testCloseWithinBound(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Request: 30 * time.Second, Close: 500 * time.Millisecond})
	r.open(t)
	done := r.stuckPoll(t)
	start := time.Now()
	if err := r.tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > r.tr.CloseBound() {
		t.Errorf("Close took %v, beyond its bound %v", took, r.tr.CloseBound())
	}
	r.waitClosed(t, start, "Close")
	if err := recv(t, done, "the poll in flight"); !errors.Is(err, k.Closed) {
		t.Errorf("the poll in flight: %v, want %v", err, k.Closed)
	}
	if err := r.tr.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if st := r.tr.State(); st.Converged || !errors.Is(st.Err, k.Closed) {
		t.Errorf("state after Close: %+v", st)
	}
}

// testCloseDuringConnect: Close while the device is silent from the first
// byte of the connection (the transport is in its handshake, or for a
// protocol without one at its first request) ends Open at once and
// leaves no connection being made.
func testCloseDuringConnect(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Connect: 30 * time.Second, Request: 30 * time.Second, Close: 500 * time.Millisecond})
	if err := r.px.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.tr.Open(r.owner) }()
	r.waitFor(t, "the transport's first bytes", func(s faultproxy.Stats) bool {
		return len(s.Conns) == 1 && s.Conns[0].DroppedUp > 0
	})
	start := time.Now()
	if err := r.tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "Open"); err == nil {
		t.Error("Open succeeded after Close")
	}
	r.waitClosed(t, start, "Close during connect")
	if got := r.px.Stats().Accepted; got != 1 {
		t.Errorf("%d connections, want 1", got)
	}
}

// testActivationWithinBound: against a device that never answers, Open
// gives up within the activation bound it discloses to admission and
// keeps no connection.
func testActivationWithinBound(t *testing.T, k Kind) {
	r := newRig(t, k, Bounds{Connect: 300 * time.Millisecond, Request: 200 * time.Millisecond})
	if err := r.px.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := r.tr.Open(r.owner)
	if took := time.Since(start); took > r.tr.ActivationBound() {
		t.Errorf("Open took %v, beyond its activation bound %v", took, r.tr.ActivationBound())
	}
	if err == nil {
		t.Fatal("Open succeeded against a silent device")
	}
	if st := r.tr.State(); st.Converged || st.Err == nil {
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
