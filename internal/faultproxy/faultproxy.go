// Package faultproxy is an in-process TCP proxy for fault-injection tests.
//
// It listens on 127.0.0.1 on a free port and forwards every accepted
// connection to one target. Its mode can be switched at any time:
//
//   - Pass forwards bytes both ways.
//   - Blackhole silently drops bytes in both directions while keeping every
//     socket open, the way a partitioned network looks to a client that only
//     notices through its own keepalive or timeouts. Connections accepted while
//     blackholed are held open but never reach the target.
//   - Reset closes every connection (with RST where the platform allows it)
//     and closes each new connection at once, so clients see a refused or
//     reset peer. The listening port is kept so a later Pass reuses it.
//   - DropResponses forwards client->target and silently drops
//     target->client: requests reach the target and take effect, the client
//     never hears back. Sockets stay open; new connections reach the target.
//   - Delay forwards both ways but holds every target->client chunk for the
//     delay set with SetDelay, and every client->target chunk for the one
//     set with SetRequestDelay (none unless set), each measured from when
//     the proxy read the chunk; order is kept. Chunks already held are
//     still delivered after a change of mode.
//
// It counts current and peak concurrent client connections and, per
// connection, bytes forwarded, bytes dropped and requests (reads from the
// client forwarded to the target), so a test can assert "never two clients".
// It needs no root and never dials anything but the configured target.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is the proxy's fault mode.
type Mode int

// The fault modes.
const (
	// Pass forwards bytes both ways.
	Pass Mode = iota
	// Blackhole drops bytes both ways and keeps sockets open.
	Blackhole
	// Reset closes every connection and every new one.
	Reset
	// DropResponses forwards requests and drops responses.
	DropResponses
	// Delay holds responses for the delay set with SetDelay.
	Delay
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	case DropResponses:
		return "drop-responses"
	case Delay:
		return "delay"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// dials reports whether a connection accepted in mode m reaches the target.
func (m Mode) dials() bool { return m == Pass || m == DropResponses || m == Delay }

// forwards reports whether mode m passes a chunk read in one direction.
func (m Mode) forwards(upward bool) bool {
	return m == Pass || m == Delay || (m == DropResponses && upward)
}

// ErrClosed is returned by operations on a closed proxy.
var ErrClosed = errors.New("faultproxy: closed")

// DialTimeout bounds the dial to the target for each accepted connection.
const DialTimeout = 5 * time.Second

// ConnStats describes one client connection the proxy accepted.
type ConnStats struct {
	// ID numbers connections in accept order, from 1.
	ID int
	// Client is the client's address.
	Client string
	// UpstreamAddr is the proxy's local address on its connection to the
	// target: the client address the target sees. Empty when the
	// connection never reached the target.
	UpstreamAddr string
	// Opened is when the proxy registered the connection, before it
	// forwarded any byte.
	Opened time.Time
	// Open is true until both sides are closed.
	Open bool
	// Upstream is true when the connection reached the target.
	Upstream bool
	// BytesUp and BytesDown are bytes forwarded client->target and
	// target->client.
	BytesUp, BytesDown int64
	// DroppedUp and DroppedDown are bytes discarded (Blackhole; DroppedDown
	// also in DropResponses).
	DroppedUp, DroppedDown int64
	// Requests counts reads from the client that were forwarded to the
	// target; for request/response protocols whose client writes one request
	// per segment (Modbus TCP, S7) it is the number of requests.
	Requests int64
	// Err is why the connection ended, if it ended with an error other than
	// an orderly close or a close by the proxy.
	Err error
}

// Stats is a snapshot of the proxy's counters.
type Stats struct {
	Mode Mode
	// Current is the number of client connections open now.
	Current int
	// Peak is the highest Current ever observed.
	Peak int
	// Accepted counts every accepted connection, including refused ones.
	Accepted int
	// Refused counts connections closed at once in Reset mode or because
	// the target could not be dialled.
	Refused int
	// Conns lists every connection accepted in Pass or Blackhole mode.
	Conns []ConnStats
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	closed  bool
	current int
	peak    int
	accept  int
	refused int
	conns   []*conn
	delay   time.Duration // responses' hold in Delay mode
	delayUp time.Duration // requests' hold in Delay mode
	changed chan struct{} // closed and replaced on every change
	stop    func() bool

	wg sync.WaitGroup
}

type conn struct {
	stats  ConnStats
	client net.Conn
	up     net.Conn // nil when accepted while blackholed
	ended  int      // directions finished (pump goroutines done)
}

// Start listens on 127.0.0.1:0 and forwards to target (host:port). The proxy
// runs until ctx ends or Close is called.
func Start(ctx context.Context, target string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen for target %s: %w", target, err)
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{})}
	// The proxy lives no longer than ctx; Close releases this hook.
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	p.mu.Lock()
	p.stop = stop
	p.mu.Unlock()
	p.wg.Add(1)
	go p.serve(ctx)
	return p, nil
}

// Addr is the proxy's listening address, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode reports the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetDelay sets how long Delay mode holds each response chunk; it takes
// effect for chunks read after it returns.
func (p *Proxy) SetDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("faultproxy: set delay %s: must be >= 0", d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.delay = d
	return nil
}

// SetRequestDelay sets how long Delay mode holds each request chunk
// (client->target); it takes effect for chunks read after it returns. With
// SetDelay it splits an added round trip between both directions, as a
// slow network does: a request then lands late as well as its answer.
func (p *Proxy) SetRequestDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("faultproxy: set request delay %s: must be >= 0", d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.delayUp = d
	return nil
}

// SetMode switches the mode. Switching to Reset closes every connection
// before it returns.
func (p *Proxy) SetMode(m Mode) error {
	if m < Pass || m > Delay {
		return fmt.Errorf("faultproxy: set mode %v: unknown mode", m)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.mode = m
	var kill []*conn
	if m == Reset {
		kill = p.openConnsLocked()
	}
	p.notifyLocked()
	p.mu.Unlock()
	for _, c := range kill {
		c.abort()
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Mode: p.mode, Current: p.current, Peak: p.peak, Accepted: p.accept, Refused: p.refused}
	s.Conns = make([]ConnStats, len(p.conns))
	for i, c := range p.conns {
		s.Conns[i] = c.stats
	}
	return s
}

// Current is the number of client connections open now.
func (p *Proxy) Current() int { return p.Stats().Current }

// Peak is the highest number of concurrent client connections seen.
func (p *Proxy) Peak() int { return p.Stats().Peak }

// WaitFor blocks until cond holds for a snapshot of the counters or ctx ends.
// It re-evaluates cond on every change, so it never sleeps on a timer.
func (p *Proxy) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		s := p.Stats()
		if cond(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: wait (current %d, peak %d, accepted %d): %w",
				s.Current, s.Peak, s.Accepted, ctx.Err())
		case <-changed:
		}
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	kill := p.openConnsLocked()
	p.notifyLocked()
	stop := p.stop
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
	err := p.ln.Close()
	for _, c := range kill {
		c.abort()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) openConnsLocked() []*conn {
	var out []*conn
	for _, c := range p.conns {
		if c.stats.Open {
			out = append(out, c)
		}
	}
	return out
}

func (p *Proxy) serve(ctx context.Context) {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // listener closed
		}
		p.mu.Lock()
		p.accept++
		mode, closed := p.mode, p.closed
		if closed || mode == Reset {
			p.refused++
			p.notifyLocked()
			p.mu.Unlock()
			abortConn(cl)
			continue
		}
		p.mu.Unlock()

		var up net.Conn
		if mode.dials() {
			d := net.Dialer{Timeout: DialTimeout}
			up, err = d.DialContext(ctx, "tcp", p.target)
			if err != nil {
				// The client sees the same thing it would see from the
				// target itself: a closed connection.
				p.mu.Lock()
				p.refused++
				p.notifyLocked()
				p.mu.Unlock()
				abortConn(cl)
				continue
			}
		}
		p.mu.Lock()
		if p.closed || p.mode == Reset {
			// The mode changed while dialling; honour it.
			p.refused++
			p.notifyLocked()
			p.mu.Unlock()
			abortConn(cl)
			if up != nil {
				abortConn(up)
			}
			continue
		}
		c := &conn{client: cl, up: up}
		c.stats = ConnStats{ID: len(p.conns) + 1, Client: cl.RemoteAddr().String(), Open: true, Upstream: up != nil, Opened: time.Now()}
		if up != nil {
			c.stats.UpstreamAddr = up.LocalAddr().String()
		}
		p.conns = append(p.conns, c)
		p.current++
		p.peak = max(p.peak, p.current)
		p.notifyLocked()
		p.mu.Unlock()

		p.wg.Add(2)
		go p.pump(c, true)
		go p.pump(c, false)
	}
}

// pump copies one direction of c; upward is client->target.
func (p *Proxy) pump(c *conn, upward bool) {
	defer p.wg.Done()
	src, dst := c.client, c.up
	if !upward {
		src, dst = c.up, c.client
	}
	var err error
	if src != nil {
		err = p.copyChunks(c, src, dst, upward)
	} else {
		// No target side (accepted while blackholed): nothing to read;
		// the client's reader ending ends this connection.
		p.waitEnded(c)
	}
	p.finish(c, upward, err)
}

// copyChunks forwards, holds or drops what src sends until src ends. Once
// one chunk has been held, every later one of that direction goes through
// the same line so order is kept.
func (p *Proxy) copyChunks(c *conn, src, dst net.Conn, upward bool) error {
	var line *delayLine
	defer func() {
		if line != nil {
			line.close()
		}
	}()
	buf := make([]byte, 32*1024)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			read := time.Now()
			p.mu.Lock()
			mode, delay := p.mode, p.delay
			if upward {
				delay = p.delayUp
			}
			pass := dst != nil && mode.forwards(upward)
			switch {
			case pass && upward:
				c.stats.BytesUp += int64(n)
				c.stats.Requests++
			case pass:
				c.stats.BytesDown += int64(n)
			case upward:
				c.stats.DroppedUp += int64(n)
			default:
				c.stats.DroppedDown += int64(n)
			}
			p.notifyLocked()
			p.mu.Unlock()
			// Requests go through a line only once one was held, so
			// Delay without a request delay leaves them untouched.
			hold := pass && ((mode == Delay && (!upward || delay > 0)) || line != nil)
			switch {
			case hold:
				if line == nil {
					line = newDelayLine(dst)
				}
				if mode != Delay {
					delay = 0
				}
				if werr := line.send(buf[:n], read.Add(delay)); werr != nil {
					return werr
				}
			case pass:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return werr
				}
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
	}
}

// delayLine writes chunks to dst in order, each no earlier than its due
// instant.
type delayLine struct {
	dst  net.Conn
	q    chan heldChunk
	done chan struct{}
	mu   sync.Mutex
	err  error
}

type heldChunk struct {
	due time.Time
	b   []byte
}

func newDelayLine(dst net.Conn) *delayLine {
	l := &delayLine{dst: dst, q: make(chan heldChunk, 1024), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *delayLine) run() {
	defer close(l.done)
	for h := range l.q {
		if d := time.Until(h.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := l.dst.Write(h.b); err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			for range l.q { // drain so send never blocks
			}
			return
		}
	}
}

// send queues a copy of b; it returns the error of an earlier write.
func (l *delayLine) send(b []byte, due time.Time) error {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	l.q <- heldChunk{due: due, b: append([]byte(nil), b...)}
	return nil
}

// close delivers what is queued and waits for the writer.
func (l *delayLine) close() {
	close(l.q)
	<-l.done
}

// waitEnded blocks until the other pump of c has finished.
func (p *Proxy) waitEnded(c *conn) {
	for {
		p.mu.Lock()
		ended, changed := c.ended, p.changed
		p.mu.Unlock()
		if ended > 0 {
			return
		}
		<-changed
	}
}

// finish records one direction's end (upward: the client's side ended).
// Outside a blackhole the first end closes both sockets so a half-closed
// stream never keeps a connection counted as open. Inside a blackhole the
// other side stays open: a partition hides a peer's close as well as its
// bytes, so the client must find out through its own keepalive. Dropped
// responses hide the target's close the same way.
func (p *Proxy) finish(c *conn, upward bool, err error) {
	p.mu.Lock()
	c.ended++
	first := c.ended == 1
	if first {
		if err != nil && !errors.Is(err, net.ErrClosed) && !p.closed && p.mode != Reset {
			c.stats.Err = err
		}
	}
	if c.ended == 2 {
		c.stats.Open = false
		p.current--
	}
	// DropResponses hides the target's end as it hides its bytes; the
	// client's end is a request and passes.
	hide := first && !p.closed && c.up != nil && (p.mode == Blackhole || (p.mode == DropResponses && !upward))
	p.notifyLocked()
	p.mu.Unlock()
	switch {
	case hide && upward:
		_ = c.client.Close()
	case hide:
		_ = c.up.Close()
	default:
		_ = c.client.Close()
		if c.up != nil {
			_ = c.up.Close()
		}
	}
}

func (c *conn) abort() {
	abortConn(c.client)
	if c.up != nil {
		abortConn(c.up)
	}
}

// abortConn closes with SO_LINGER 0 so the peer sees a reset, not an
// orderly end of stream.
func abortConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
