package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// waitTimeout bounds every wait in these tests; it is a hang guard, never
// an assertion about speed.
const waitTimeout = 10 * time.Second

// target is a TCP server whose accepted connections the test drives.
type target struct {
	ln    net.Listener
	conns chan net.Conn
	mu    sync.Mutex
	all   []net.Conn
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.mu.Lock()
			tg.all = append(tg.all, c)
			tg.mu.Unlock()
			tg.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		tg.mu.Lock()
		defer tg.mu.Unlock()
		for _, c := range tg.all {
			c.Close()
		}
	})
	return tg
}

func (tg *target) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-tg.conns:
		return c
	case <-time.After(waitTimeout):
		t.Fatal("target accepted no connection")
		return nil
	}
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func waitFor(t *testing.T, p *Proxy, what string, cond func(Stats) bool) Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (stats %+v)", what, err, p.Stats())
	}
	return p.Stats()
}

func TestPassForwardsAndCounts(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c := dial(t, p)
	srv := tg.next(t)

	for _, msg := range []string{"hello", "world!"} {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if got := readN(t, srv, len(msg)); string(got) != msg {
			t.Fatalf("target got %q, want %q", got, msg)
		}
		// One request per forwarded read; wait for the count so the next
		// write is a separate read.
		want := map[string]int64{"hello": 1, "world!": 2}[msg]
		waitFor(t, p, "request count", func(s Stats) bool { return len(s.Conns) == 1 && s.Conns[0].Requests == want })
	}
	if _, err := srv.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 5); string(got) != "reply" {
		t.Fatalf("client got %q", got)
	}
	s := waitFor(t, p, "bytes down", func(s Stats) bool { return len(s.Conns) == 1 && s.Conns[0].BytesDown == 5 })
	cs := s.Conns[0]
	if cs.ID != 1 || !cs.Open || !cs.Upstream || cs.BytesUp != 11 || cs.Requests != 2 || cs.DroppedUp != 0 || cs.DroppedDown != 0 {
		t.Fatalf("conn stats %+v", cs)
	}
	if s.Current != 1 || s.Peak != 1 || s.Accepted != 1 || s.Mode != Pass {
		t.Fatalf("stats %+v", s)
	}

	// Closing the client ends the connection on both sides.
	c.Close()
	waitFor(t, p, "connection closed", func(s Stats) bool { return s.Current == 0 && !s.Conns[0].Open })
	_ = srv.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := srv.Read(make([]byte, 1)); err == nil {
		t.Fatal("target side still open after the client closed")
	}
}

func TestPeakConcurrentConnections(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	var cs []net.Conn
	for range 3 {
		cs = append(cs, dial(t, p))
		tg.next(t)
	}
	waitFor(t, p, "three open", func(s Stats) bool { return s.Current == 3 })
	cs[0].Close()
	waitFor(t, p, "two open", func(s Stats) bool { return s.Current == 2 })
	dial(t, p)
	tg.next(t)
	s := waitFor(t, p, "three open again", func(s Stats) bool { return s.Current == 3 })
	if s.Peak != 3 || s.Accepted != 4 || len(s.Conns) != 4 {
		t.Fatalf("stats %+v", s)
	}
	for _, c := range cs[1:] {
		c.Close()
	}
	s = waitFor(t, p, "one open", func(s Stats) bool { return s.Current == 1 })
	if s.Peak != 3 {
		t.Fatalf("peak %d after closes, want 3", s.Peak)
	}
}

func TestBlackholeDropsBothWaysAndKeepsSockets(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c := dial(t, p)
	srv := tg.next(t)
	waitFor(t, p, "registered", func(s Stats) bool { return s.Current == 1 })

	if err := p.SetMode(Blackhole); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write([]byte("gone!")); err != nil {
		t.Fatal(err)
	}
	s := waitFor(t, p, "drops", func(s Stats) bool { return s.Conns[0].DroppedUp == 4 && s.Conns[0].DroppedDown == 5 })
	if cs := s.Conns[0]; cs.BytesUp != 0 || cs.BytesDown != 0 || cs.Requests != 0 || !cs.Open || s.Current != 1 {
		t.Fatalf("stats while blackholed %+v", s)
	}

	// A connection made while blackholed is held but never reaches the
	// target.
	c2 := dial(t, p)
	if _, err := c2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	s = waitFor(t, p, "second conn", func(s Stats) bool { return len(s.Conns) == 2 && s.Conns[1].DroppedUp == 1 })
	if s.Conns[1].Upstream || s.Current != 2 || s.Peak != 2 {
		t.Fatalf("blackholed accept %+v", s)
	}

	// Back to pass: the original sockets were kept, so new bytes flow and
	// the dropped ones never show up.
	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, srv, 4); string(got) != "back" {
		t.Fatalf("target got %q after blackhole, want only the new bytes", got)
	}
	if _, err := srv.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 2); string(got) != "ok" {
		t.Fatalf("client got %q after blackhole, want only the new bytes", got)
	}
	select {
	case extra := <-tg.conns:
		t.Fatalf("target accepted a connection made while blackholed: %v", extra.RemoteAddr())
	default:
	}
}

// A target closing its side during a blackhole is hidden from the client
// too; once traffic passes again the client's next write finds the end.
func TestBlackholeHidesPeerClose(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c := dial(t, p)
	srv := tg.next(t)
	waitFor(t, p, "registered", func(s Stats) bool { return s.Current == 1 })
	if err := p.SetMode(Blackhole); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	// Not a speed check: only whether the close leaks through (EOF) or
	// not (the read deadline passes).
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("client saw %v through a blackhole, want nothing", err)
	}
	if s := p.Stats(); s.Current != 1 || !s.Conns[0].Open {
		t.Fatalf("stats %+v", s)
	}
	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	var err error
	for err == nil { // the first write may be buffered before the failure shows
		if _, err = c.Write([]byte("x")); err == nil {
			_, err = c.Read(make([]byte, 1))
		}
	}
	if isTimeout(err) {
		t.Fatalf("client connection not ended after the blackhole lifted: %v", err)
	}
	waitFor(t, p, "closed", func(s Stats) bool { return s.Current == 0 })
}

func TestResetClosesAllAndRefusesNew(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c1, c2 := dial(t, p), dial(t, p)
	s1, s2 := tg.next(t), tg.next(t)
	waitFor(t, p, "two open", func(s Stats) bool { return s.Current == 2 })

	if err := p.SetMode(Reset); err != nil {
		t.Fatal(err)
	}
	for i, c := range []net.Conn{c1, c2, s1, s2} {
		_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			t.Fatalf("socket %d not closed by reset: %v", i, err)
		}
	}
	waitFor(t, p, "none open", func(s Stats) bool { return s.Current == 0 })

	// New connections are closed at once and never reach the target.
	expectRefused(t, p)
	s := waitFor(t, p, "refused", func(s Stats) bool { return s.Refused == 1 })
	if len(s.Conns) != 2 || s.Accepted != 3 || s.Peak != 2 {
		t.Fatalf("stats %+v", s)
	}

	// Pass again reuses the same port.
	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	c4 := dial(t, p)
	s4 := tg.next(t)
	if _, err := c4.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, s4, 5); !bytes.Equal(got, []byte("again")) {
		t.Fatalf("got %q", got)
	}
}

func TestTargetDownIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := start(t, addr)
	expectRefused(t, p)
	s := waitFor(t, p, "refused", func(s Stats) bool { return s.Refused == 1 })
	if s.Current != 0 || len(s.Conns) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestContextEndClosesProxy(t *testing.T) {
	tg := newTarget(t)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	tg.next(t)
	cancel()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("connection survived the proxy's context: %v", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer wcancel()
	if err := p.WaitFor(wctx, func(s Stats) bool { return s.Current == 0 }); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(Blackhole); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetMode after close: %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), waitTimeout); err == nil {
		c.Close()
		t.Fatal("proxy still listening after its context ended")
	}
}

func TestUnknownMode(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	if err := p.SetMode(Mode(42)); err == nil {
		t.Fatal("unknown mode accepted")
	}
	if p.Mode() != Pass {
		t.Fatalf("mode %v after a refused change", p.Mode())
	}
	if Blackhole.String() != "blackhole" || DropResponses.String() != "drop-responses" || Delay.String() != "delay" || Mode(42).String() != "mode(42)" {
		t.Fatal("mode names")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// expectRefused dials p and expects the connection to be closed at once:
// either the dial itself sees the reset (the proxy closed before connect
// returned) or the first read fails.
func expectRefused(t *testing.T, p *Proxy) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), waitTimeout)
	if err != nil {
		if isTimeout(err) {
			t.Fatalf("dial timed out instead of being refused: %v", err)
		}
		return
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("connection not refused: %v", err)
	}
}

// Dropped responses: the request reaches the target and is counted, the
// reply never reaches the client, the socket stays open, and a connection
// made meanwhile still reaches the target.
func TestDropResponsesForwardsRequestsOnly(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c := dial(t, p)
	srv := tg.next(t)
	waitFor(t, p, "registered", func(s Stats) bool { return s.Current == 1 })
	if err := p.SetMode(DropResponses); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("renew")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, srv, 5); string(got) != "renew" {
		t.Fatalf("target got %q, want the request", got)
	}
	if _, err := srv.Write([]byte("ack!")); err != nil {
		t.Fatal(err)
	}
	s := waitFor(t, p, "dropped reply", func(s Stats) bool { return s.Conns[0].DroppedDown == 4 })
	if cs := s.Conns[0]; cs.BytesUp != 5 || cs.Requests != 1 || cs.BytesDown != 0 || cs.DroppedUp != 0 || !cs.Open {
		t.Fatalf("stats while dropping responses %+v", cs)
	}

	c2 := dial(t, p)
	srv2 := tg.next(t)
	if _, err := c2.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, srv2, 2); string(got) != "hi" {
		t.Fatalf("new connection's target got %q", got)
	}
	if s := waitFor(t, p, "second conn", func(s Stats) bool { return len(s.Conns) == 2 }); !s.Conns[1].Upstream {
		t.Fatalf("connection accepted while dropping responses did not reach the target: %+v", s.Conns[1])
	}

	// The target's close is hidden like its bytes.
	srv2.Close()
	_ = c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c2.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("client saw %v of a target whose responses are dropped, want nothing", err)
	}

	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 2); string(got) != "ok" {
		t.Fatalf("client got %q after pass, want only the new reply", got)
	}
}

// Delay holds each response for the set delay, keeps order, leaves
// requests alone, and delivers what it holds after a switch back to Pass.
func TestDelayHoldsResponsesInOrder(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c := dial(t, p)
	srv := tg.next(t)
	waitFor(t, p, "registered", func(s Stats) bool { return s.Current == 1 })
	if err := p.SetDelay(-time.Second); err == nil {
		t.Fatal("negative delay accepted")
	}
	const hold = 150 * time.Millisecond
	if err := p.SetDelay(hold); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(Delay); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("req")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, srv, 3); string(got) != "req" {
		t.Fatalf("target got %q", got)
	}
	sent := time.Now()
	if _, err := srv.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "first chunk read", func(s Stats) bool { return s.Conns[0].BytesDown == 3 })
	if _, err := srv.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "second chunk read", func(s Stats) bool { return s.Conns[0].BytesDown == 6 })
	// Switching back still delivers what is held, after it, in order.
	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write([]byte("3")); err != nil {
		t.Fatal(err)
	}
	got := readN(t, c, 7)
	// A delay can only make delivery later: this lower bound cannot flake.
	if el := time.Since(sent); el < hold {
		t.Fatalf("response delivered %s after it was sent, want >= %s", el, hold)
	}
	if string(got) != "onetwo3" {
		t.Fatalf("client got %q, want the responses in order", got)
	}
	if s := p.Stats(); s.Conns[0].DroppedDown != 0 || s.Conns[0].Requests != 1 {
		t.Fatalf("stats %+v", s.Conns[0])
	}
}

// UpstreamAddr is the address the target sees, so a target's own request
// log can be matched to the proxy's connection.
func TestUpstreamAddrIsWhatTheTargetSees(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	before := time.Now()
	dial(t, p)
	srv := tg.next(t)
	s := waitFor(t, p, "registered", func(s Stats) bool { return s.Current == 1 })
	if cs := s.Conns[0]; cs.UpstreamAddr != srv.RemoteAddr().String() || cs.Opened.Before(before) {
		t.Fatalf("conn %+v; target sees %s", cs, srv.RemoteAddr())
	}
}

// A request delay holds what the client sends as SetDelay holds what the
// target answers: both directions together add the round trip a slow
// network adds, and each direction keeps its order.
func TestDelayHoldsRequestsWithARequestDelay(t *testing.T) {
	tg := newTarget(t)
	p := start(t, tg.ln.Addr().String())
	c := dial(t, p)
	srv := tg.next(t)
	waitFor(t, p, "registered", func(s Stats) bool { return s.Current == 1 })
	if err := p.SetRequestDelay(-time.Second); err == nil {
		t.Fatal("negative request delay accepted")
	}
	const up, down = 100 * time.Millisecond, 150 * time.Millisecond
	if err := p.SetRequestDelay(up); err != nil {
		t.Fatal(err)
	}
	if err := p.SetDelay(down); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(Delay); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "first request read", func(s Stats) bool { return s.Conns[0].BytesUp == 1 })
	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	got := readN(t, srv, 2)
	// Delays only make delivery later: these lower bounds cannot flake.
	if el := time.Since(sent); el < up {
		t.Fatalf("request delivered %s after it was sent, want >= %s", el, up)
	}
	if string(got) != "ab" {
		t.Fatalf("target got %q, want the requests in order", got)
	}
	if _, err := srv.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 2); string(got) != "ok" {
		t.Fatalf("client got %q", got)
	}
	if el := time.Since(sent); el < up+down {
		t.Fatalf("round trip %s, want >= %s", el, up+down)
	}
	if s := p.Stats(); s.Conns[0].Requests != 2 || s.Conns[0].DroppedUp != 0 {
		t.Fatalf("stats %+v", s.Conns[0])
	}
}
