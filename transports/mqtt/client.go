// Package mqtt is leasebridge's MQTT transport on paho.mqtt.golang: the
// broker side of every session and the two ends of a bridge route.
//
// A Client activates in bounded phases: connect (connect_timeout), then
// reconcile: subscribe every topic and publish the retained status
// (reconcile_timeout). A connection whose reconcile is not done is given
// unmatched_grace to finish before it is recycled; at most two recycles
// follow the first attempt, so Open never takes longer than
// admission.MQTTActivationBound(connect, reconcile, grace) =
// 3*connect + 3*reconcile + 2*unmatched_grace, and it enforces that with a
// deadline of its own.
//
// Once open, the Client reports converged (connected and every
// subscription acknowledged) or not, with the instant it changed, and
// reconnects on its own after a loss; the step-down supervisor reads State.
//
// paho.mqtt.golang speaks MQTT 3.1 and 3.1.1 only. The session's epoch is
// therefore a field of every JSON payload the package encodes, and the
// session's status topic carries owner, epoch and state (retained, with a
// last will saying "lost").
package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/transports"
)

// Kind is the transport kind this package registers.
const Kind = "mqtt"

// Message is one message received on a subscription.
type Message struct {
	Topic     string
	Payload   []byte
	QoS       byte
	Retained  bool
	Duplicate bool
	ack       func()
}

// Ack acknowledges a QoS 1 or 2 message to the broker (a no-op for QoS 0
// and after the first call). Only handlers of ManualAck subscriptions call
// it; an ack sent after the connection was lost is dropped and the broker
// redelivers the message.
func (m Message) Ack() {
	if m.ack != nil {
		m.ack()
	}
}

// Subscription is a topic filter the Client keeps subscribed.
type Subscription struct {
	Filter string
	QoS    byte
	// ManualAck defers the acknowledgement to the handler's Message.Ack,
	// so a bridge acknowledges a message only once it was forwarded.
	ManualAck bool
	// Handler receives each message. It runs on paho's delivery goroutine
	// and must not block: a blocked handler stalls keepalive processing.
	Handler func(Message)
}

// Identity is the lease owner a Client publishes as.
type Identity struct {
	Owner string
	Epoch uint64
}

// Client is the paho transport of one broker for one session. It
// implements transports.Transport. Its methods are safe for concurrent use.
type Client struct {
	name    string
	s       *settings
	session string
	node    string

	// opMu serialises Open and Close.
	opMu sync.Mutex

	mu   sync.Mutex
	subs []*Subscription
	id   Identity
	// status is what the status topic says while connected; a reconcile
	// after a reconnect repeats it, so "serving" survives a broker restart.
	status    string
	statusFul bool
	state     transports.State
	changed   chan struct{}
	pc        paho.Client   // the live connection, nil when there is none
	gone      chan struct{} // closed when pc is lost or torn down
	conns     map[*trackedConn]struct{}
	attempts  int
	life      context.Context // one ownership, from Open to Close
	stop      context.CancelCauseFunc
	lost      chan error
	// armed: the ownership's connection is up and supervised, so a loss
	// starts recover; recovering: recover runs.
	armed, recovering bool
	endOnce           *sync.Once     // the end of the current ownership, once
	wg                sync.WaitGroup // recover while it runs
}

var _ transports.Transport = (*Client)(nil)

// New builds a Client; it connects nothing until Open.
func New(name string, cfg Config) (*Client, error) {
	s, err := resolve(cfg)
	if err != nil {
		return nil, fmt.Errorf("transport %s: %w", name, err)
	}
	return &Client{
		name:    name,
		s:       s,
		session: cfg.Session,
		node:    cfg.Node,
		state:   transports.State{Since: time.Now()},
		changed: make(chan struct{}),
		conns:   map[*trackedConn]struct{}{},
		lost:    make(chan error, 1),
	}, nil
}

// Name identifies the transport, e.g. "mqtt:local".
func (c *Client) Name() string { return c.name }

// ClientID is the fixed MQTT client id of the session.
func (c *Client) ClientID() string { return c.s.clientID }

// StatusTopic is the session's status topic.
func (c *Client) StatusTopic() string { return c.s.statusTopic }

// URL is the broker URL, its password redacted.
func (c *Client) URL() string { return c.s.url.String() }

// ActivationBound is 3*connect + 3*reconcile + 2*unmatched_grace, computed
// by admission.MQTTActivationBound.
func (c *Client) ActivationBound() time.Duration { return c.s.bound }

// ActivationParts are the keys ActivationBound is made of.
func (c *Client) ActivationParts() []admission.Part {
	return admission.MQTTActivationParts(c.s.connect, c.s.reconcile, c.s.grace)
}

// CloseBound is close_timeout.
func (c *Client) CloseBound() time.Duration { return c.s.close }

// DetectionBound is how long a silent cut may go unnoticed; see the
// package-level DetectionBound.
func (c *Client) DetectionBound() time.Duration { return DetectionBound(c.s.keepAlive) }

// ConnectAttempts counts the MQTT connect attempts made since New
// (activation and reconnects).
func (c *Client) ConnectAttempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

// SetIdentity sets the owner and epoch stamped on the status topic, the
// last will and every encoded payload. The session sets it after winning
// the lease and before Open.
func (c *Client) SetIdentity(id Identity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id = id
}

// Identity returns what SetIdentity set.
func (c *Client) Identity() Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// Subscribe adds a subscription; it is part of every reconcile. It must be
// called before Open.
func (c *Client) Subscribe(sub Subscription) error {
	if sub.Handler == nil || sub.QoS > 2 || sub.Filter == "" {
		return fmt.Errorf("%w: broker %s: subscription %q qos %d: want a filter, qos 0-2 and a handler", ErrConfig, c.s.url, sub.Filter, sub.QoS)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.life != nil {
		return fmt.Errorf("%w: broker %s: subscribe %s after Open", ErrOpen, c.s.url, sub.Filter)
	}
	for _, s := range c.subs {
		if s.Filter == sub.Filter {
			return fmt.Errorf("%w: broker %s: topic %s subscribed twice", ErrConfig, c.s.url, sub.Filter)
		}
	}
	c.subs = append(c.subs, &sub)
	return nil
}

// State reports convergence and the instant it last changed.
func (c *Client) State() transports.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// WaitState blocks until cond holds for the state or ctx ends; it wakes on
// every change, never on a timer.
func (c *Client) WaitState(ctx context.Context, cond func(transports.State) bool) (transports.State, error) {
	for {
		c.mu.Lock()
		st, ch := c.state, c.changed
		c.mu.Unlock()
		if cond(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("mqtt: broker %s: wait for state (converged %v since %v): %w", c.s.url, st.Converged, st.Since, ctx.Err())
		case <-ch:
		}
	}
}

// setState records convergence; Since moves only on a transition.
func (c *Client) setState(converged bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setStateLocked(converged, err, time.Now())
}

func (c *Client) setStateLocked(converged bool, err error, at time.Time) {
	if c.state.Converged != converged {
		c.state.Since = at
	}
	c.state.Converged, c.state.Err = converged, err
	close(c.changed)
	c.changed = make(chan struct{})
}

// markGoneLocked wakes every publish waiting on the current connection.
func (c *Client) markGoneLocked() {
	if c.gone != nil {
		close(c.gone)
		c.gone = nil
	}
}

// errClosing is the cause with which Close ends an ownership.
var errClosing = errors.New("mqtt: closing")

// reserve is kept back from the activation (close) deadline for tearing
// down, so Open (Close) returns within its bound and not just after it.
func reserve(bound time.Duration) time.Duration { return min(bound/20, 100*time.Millisecond) }

// Open connects and reconciles within the activation bound (see the
// package documentation), or within ctx's deadline when that is earlier.
// ctx bounds Open only: the connection then lives, reconnecting by itself,
// until Close.
func (c *Client) Open(ctx context.Context) error {
	if c.s.missing != nil {
		return c.s.missing
	}
	start := time.Now()
	c.opMu.Lock()
	defer c.opMu.Unlock()

	c.mu.Lock()
	if c.life != nil {
		c.mu.Unlock()
		return fmt.Errorf("%w: broker %s", ErrOpen, c.s.url)
	}
	// The connection lives until Close, not until ctx ends: callers wrap
	// the owner context in the activation deadline and cancel that wrapper
	// as soon as Open returns. The lease manager calls Close (within
	// CloseBound) before its self-fence deadline.
	life, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	c.life, c.stop = life, stop
	c.status, c.statusFul = StateActive, false
	// A new ownership starts unconverged now, not at the previous loss.
	c.setStateLocked(false, nil, start)
	c.state.Since = start
	c.mu.Unlock()

	deadline := start.Add(c.s.bound)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	actx, cancel := context.WithDeadline(life, deadline.Add(-reserve(c.s.bound)))
	defer cancel()
	// Cancelling ctx during Open abandons the activation.
	unhook := context.AfterFunc(ctx, cancel)
	defer unhook()

	pc, err := c.activate(actx)
	if err == nil {
		c.mu.Lock()
		if life.Err() != nil {
			err = fmt.Errorf("%w: broker %s: owner context ended during activation", ErrClosed, c.s.url)
		} else {
			c.armLocked(life, pc)
		}
		c.mu.Unlock()
	}
	if err != nil {
		c.teardown(pc, false, 0)
		c.mu.Lock()
		c.life, c.stop = nil, nil
		c.setStateLocked(false, err, time.Now())
		c.mu.Unlock()
		stop(err)
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return err
	}
	return nil
}

// activate runs up to three connect+reconcile attempts with an
// unmatched-grace wait before each recycle.
func (c *Client) activate(ctx context.Context) (paho.Client, error) {
	const attempts = 3
	var last error
	for i := 1; i <= attempts; i++ {
		pc, pending, err := c.attempt(ctx)
		if err == nil {
			return pc, nil
		}
		last = err
		if errors.Is(err, ErrRefused) || errors.Is(err, ErrConfig) || errors.Is(err, ErrSubscriptionRejected) || errors.Is(err, ErrTLS) {
			c.teardown(pc, false, 0)
			return nil, err
		}
		if i < attempts {
			// Unmatched grace: a reconcile still in flight may finish; a
			// failed connect waits it out as a backoff before the recycle.
			if c.grace(ctx, pending) == nil {
				if c.confirm(pc) {
					return pc, nil
				}
			}
		}
		c.teardown(pc, false, 0)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: broker %s, client id %s after %d connect attempts: %w", ErrNotConverged, c.s.url, c.s.clientID, c.ConnectAttempts(), last)
}

// grace waits up to unmatched_grace for a pending reconcile; nil means it
// completed successfully.
func (c *Client) grace(ctx context.Context, pending <-chan error) error {
	t := time.NewTimer(c.s.grace)
	defer t.Stop()
	if pending == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return errors.New("no reconcile pending")
	}
	select {
	case err := <-pending:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("unmatched grace expired")
	}
}

// confirm marks pc converged if it is still connected.
func (c *Client) confirm(pc paho.Client) bool {
	if pc == nil || !pc.IsConnectionOpen() {
		return false
	}
	c.setState(true, nil)
	return true
}

// attempt is one connect (bounded by connect_timeout) and reconcile
// (bounded by reconcile_timeout). On a reconcile timeout it returns the
// live client and the still pending reconcile for the grace wait.
func (c *Client) attempt(ctx context.Context) (paho.Client, <-chan error, error) {
	pc, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	pending := make(chan error, 1)
	// Bounded by reconcile plus grace, the longest anyone waits for it, so
	// a token paho never completes cannot keep the goroutine.
	rctx, rcancel := context.WithTimeout(ctx, c.s.reconcile+c.s.grace)
	go func() { defer rcancel(); pending <- c.reconcile(rctx, pc) }()
	t := time.NewTimer(c.s.reconcile)
	defer t.Stop()
	select {
	case err := <-pending:
		if err != nil {
			return pc, nil, err
		}
		if !c.confirm(pc) {
			return pc, nil, fmt.Errorf("%w: broker %s: connection lost during reconcile", ErrNotConnected, c.s.url)
		}
		return pc, nil, nil
	case <-ctx.Done():
		return pc, nil, fmt.Errorf("broker %s: reconcile: %w", c.s.url, ctx.Err())
	case <-t.C:
		return pc, pending, fmt.Errorf("broker %s: reconcile not done within reconcile_timeout %v", c.s.url, c.s.reconcile)
	}
}

// connect makes one MQTT connect attempt within connect_timeout.
func (c *Client) connect(ctx context.Context) (paho.Client, error) {
	pw, err := c.s.password()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.attempts++
	id := c.id
	subs := append([]*Subscription(nil), c.subs...)
	c.mu.Unlock()

	o := c.options(pw, id)
	// The dial and the handshake belong to this attempt alone: once it is
	// abandoned, a late socket is closed instead of completing a CONNECT
	// that would take the session's client id over from the next attempt.
	cctx, ccancel := context.WithTimeout(ctx, c.s.connect)
	defer ccancel()
	o.SetCustomOpenConnectionFn(c.dialer(cctx))
	o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { m.Ack() })
	var pc paho.Client
	o.SetConnectionLostHandler(func(_ paho.Client, err error) { c.connLost(pc, err) })
	pc = paho.NewClient(o)
	for _, s := range subs {
		pc.AddRoute(s.Filter, handler(s))
	}

	tok := pc.Connect()
	t := time.NewTimer(c.s.connect)
	defer t.Stop()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		ccancel()
		c.teardown(pc, false, 0)
		return nil, fmt.Errorf("broker %s: connect: %w", c.s.url, ctx.Err())
	case <-t.C:
		ccancel()
		c.teardown(pc, false, 0)
		return nil, fmt.Errorf("broker %s: connect not done within connect_timeout %v", c.s.url, c.s.connect)
	}
	if err := tok.Error(); err != nil {
		ccancel()
		c.teardown(pc, false, 0)
		return nil, c.connectError(tok, err)
	}
	c.mu.Lock()
	c.pc, c.gone = pc, make(chan struct{})
	// A loss signalled for an earlier connection is stale now.
	select {
	case <-c.lost:
	default:
	}
	c.mu.Unlock()
	return pc, nil
}

// options are the paho options of every connect attempt with password pw;
// id is the owner identity its last will names.
func (c *Client) options(pw string, id Identity) *paho.ClientOptions {
	o := paho.NewClientOptions()
	o.AddBroker(c.s.url.URL.String()) // the full URL: paho reads its userinfo
	o.SetClientID(c.s.clientID)
	// Explicit, so paho never falls back to 3.1 with a fresh timeout.
	o.SetProtocolVersion(c.s.protocol)
	o.SetCleanSession(c.s.clean)
	o.SetKeepAlive(c.s.keepAlive)
	o.SetPingTimeout(pingTimeout(c.s.keepAlive))
	// paho's own handshake deadline is only a backstop: the timer below
	// and the per-attempt context enforce connect_timeout, and report it
	// as such instead of as a bare read timeout.
	o.SetConnectTimeout(2 * c.s.connect)
	o.SetWriteTimeout(c.s.connect)
	// Reconnects are ours (recover), so every attempt is counted and
	// bounded the same way.
	o.SetAutoReconnect(false)
	o.SetConnectRetry(false)
	o.SetResumeSubs(false)
	o.SetAutoAckDisabled(true)
	o.SetOrderMatters(true)
	o.SetUsername(c.s.creds.Username)
	o.SetPassword(pw)
	if c.s.tls != nil {
		o.SetTLSConfig(c.s.tls)
	}
	o.SetBinaryWill(c.s.statusTopic, EncodeStatus(c.statusMessage(id, StateLost, false)), 1, true)
	return o
}

// connectError says why a connect attempt failed: a CONNACK refusal that
// retrying will not change (ErrRefused), a certificate the broker or this
// client rejected (ErrTLS), or anything else, which a retry may cure.
func (c *Client) connectError(tok paho.Token, err error) error {
	if ct, ok := tok.(*paho.ConnectToken); ok {
		switch rc := ct.ReturnCode(); rc {
		case packets.ErrRefusedBadProtocolVersion, packets.ErrRefusedIDRejected,
			packets.ErrRefusedBadUsernameOrPassword, packets.ErrRefusedNotAuthorised:
			return fmt.Errorf("%w: broker %s, client id %s, user %q: %s (CONNACK code %d)",
				ErrRefused, c.s.url, c.s.clientID, c.s.creds.Username, packets.ConnackReturnCodes[rc], rc)
		}
	}
	if certRejected(err) {
		return fmt.Errorf("%w: broker %s: %w", ErrTLS, c.s.url, err)
	}
	return fmt.Errorf("broker %s: connect: %w", c.s.url, err)
}

// reconcile subscribes every topic and publishes the retained status; it
// ends when both are acknowledged, one fails, or ctx ends.
func (c *Client) reconcile(ctx context.Context, pc paho.Client) error {
	c.mu.Lock()
	filters := make(map[string]byte, len(c.subs))
	for _, s := range c.subs {
		filters[s.Filter] = s.QoS
	}
	id, state, full := c.id, c.status, c.statusFul
	c.mu.Unlock()
	if state == "" {
		state = StateActive
	}
	if len(filters) > 0 {
		tok := pc.SubscribeMultiple(filters, nil)
		if err := wait(ctx, tok); err != nil {
			return fmt.Errorf("broker %s: subscribe %v: %w", c.s.url, keys(filters), err)
		}
		if st, ok := tok.(*paho.SubscribeToken); ok {
			for f, q := range st.Result() {
				if q == 0x80 {
					return fmt.Errorf("%w: broker %s: topic %s", ErrSubscriptionRejected, c.s.url, f)
				}
			}
		}
	}
	tok := pc.Publish(c.s.statusTopic, 1, true, EncodeStatus(c.statusMessage(id, state, full)))
	if err := wait(ctx, tok); err != nil {
		return fmt.Errorf("broker %s: publish status topic %s: %w", c.s.url, c.s.statusTopic, err)
	}
	return nil
}

func (c *Client) statusMessage(id Identity, state string, full bool) StatusMessage {
	return StatusMessage{Session: c.session, Owner: id.Owner, Node: c.node, Epoch: id.Epoch, State: state, ServiceLevelFull: full}
}

// connLost is paho's connection-lost callback for pc.
func (c *Client) connLost(pc paho.Client, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pc == nil || c.pc != pc {
		return // a connection already replaced or torn down
	}
	c.markGoneLocked()
	c.setStateLocked(false, fmt.Errorf("%w: broker %s: connection lost: %w", ErrNotConnected, c.s.url, err), time.Now())
	if c.armed && !c.recovering && c.life != nil && c.life.Err() == nil {
		c.startRecoverLocked(c.life, pc)
		return
	}
	// An activation or a recover in progress picks the loss up.
	select {
	case c.lost <- err:
	default:
	}
}

// armLocked supervises pc, the connection Open established, until the
// ownership ends. No goroutine waits while the connection is up (a process
// holds thousands): paho's connection-lost callback starts recover, and
// the end of life tears down.
func (c *Client) armLocked(life context.Context, pc paho.Client) {
	c.armed, c.recovering = true, false
	once := &sync.Once{}
	c.endOnce = once
	context.AfterFunc(life, func() {
		c.mu.Lock()
		if c.recovering {
			c.mu.Unlock()
			return // recover sees the end itself
		}
		pc := c.pc
		c.mu.Unlock()
		c.ended(life, once, pc)
	})
	// Lost between the activation and now.
	select {
	case <-c.lost:
		c.startRecoverLocked(life, pc)
	default:
	}
}

func (c *Client) startRecoverLocked(life context.Context, pc paho.Client) {
	c.recovering = true
	c.wg.Add(1)
	go c.recover(life, c.endOnce, pc)
}

// ended handles the end of an ownership other than Close: Close tears down
// in order itself; any other end closes the sockets at once.
func (c *Client) ended(life context.Context, once *sync.Once, pc paho.Client) {
	once.Do(func() {
		if cause := context.Cause(life); !errors.Is(cause, errClosing) {
			c.teardown(pc, false, 0)
			c.setState(false, cause)
		}
	})
}

// recover runs after pc was lost: it reconnects and reconciles with the
// activation's phase bounds, backing off from min(250ms, grace) up to grace
// between attempts, until converged again or the ownership ends.
func (c *Client) recover(life context.Context, once *sync.Once, pc paho.Client) {
	defer c.wg.Done()
	for {
		c.teardown(pc, false, 0)
		pc = c.reconnect(life)
		c.mu.Lock()
		if life.Err() != nil {
			c.recovering = false
			c.mu.Unlock()
			c.ended(life, once, pc)
			return
		}
		select {
		case <-c.lost: // the new connection is gone already
			c.mu.Unlock()
			continue
		default:
		}
		c.recovering = false
		c.mu.Unlock()
		return
	}
}

// reconnect attempts until one converges (returning its connection) or
// life ends (returning the connection Close may still want for the released
// status, or nil).
func (c *Client) reconnect(life context.Context) paho.Client {
	backoff := min(250*time.Millisecond, c.s.grace)
	for {
		t := time.NewTimer(backoff)
		select {
		case <-life.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		next, pending, err := c.attempt(life)
		if err == nil {
			return next
		}
		if pending != nil && c.grace(life, pending) == nil && c.confirm(next) {
			return next
		}
		if life.Err() != nil {
			// Close (or the owner) ended the attempt: leave the
			// connection to ended or to Close, which still wants it for
			// the released status.
			return next
		}
		c.teardown(next, false, 0)
		c.setState(false, err)
		backoff = min(2*backoff, max(c.s.grace, 250*time.Millisecond))
	}
}

// teardown ends pc: with orderly set it publishes nothing but sends a
// DISCONNECT (so the broker withholds the will) within quiesce; it always
// closes every socket the Client opened, so nothing lingers.
func (c *Client) teardown(pc paho.Client, orderly bool, quiesce time.Duration) {
	if pc != nil {
		c.mu.Lock()
		if c.pc == pc {
			c.markGoneLocked()
			c.pc = nil
		}
		c.mu.Unlock()
		if orderly {
			pc.Disconnect(uint(quiesce / time.Millisecond))
		}
	}
	c.mu.Lock()
	conns := make([]*trackedConn, 0, len(c.conns))
	for tc := range c.conns {
		conns = append(conns, tc)
	}
	c.mu.Unlock()
	for _, tc := range conns {
		_ = tc.Close()
	}
	if pc != nil && !orderly {
		// Sockets are closed already; this only stops paho's goroutines.
		go pc.Disconnect(0)
	}
}

// Close ends the ownership within close_timeout (or ctx's deadline when
// earlier): it publishes the retained "released" status, sends DISCONNECT
// and closes every socket. Safe after a failed Open and when called twice.
func (c *Client) Close(ctx context.Context) error {
	start := time.Now()
	deadline := start.Add(c.s.close)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// Finish a little early so a caller timing Close against the same
	// bound sees it done.
	deadline = deadline.Add(-reserve(c.s.close))
	c.mu.Lock()
	stop, id := c.stop, c.id
	c.mu.Unlock()
	if stop == nil {
		return nil
	}
	// Ends an activation in progress or a recover first, so no new
	// connection is made while closing.
	stop(errClosing)
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	if c.stop == nil { // a concurrent Close finished first
		c.mu.Unlock()
		return nil
	}
	c.life, c.stop = nil, nil
	c.armed = false
	pc := c.pc
	c.mu.Unlock()

	var err error
	if pc != nil && pc.IsConnectionOpen() {
		half := time.Until(deadline) / 2
		tok := pc.Publish(c.s.statusTopic, 1, true, EncodeStatus(c.statusMessage(id, StateReleased, false)))
		wctx, cancel := context.WithTimeout(ctx, half)
		if perr := wait(wctx, tok); perr != nil {
			err = fmt.Errorf("broker %s: publish released status on %s: %w", c.s.url, c.s.statusTopic, perr)
		}
		cancel()
	}
	c.teardown(pc, pc != nil, max(0, time.Until(deadline)))
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max(0, time.Until(deadline))):
		err = errors.Join(err, fmt.Errorf("broker %s: close not done within close bound", c.s.url))
	}
	c.setState(false, ErrClosed)
	return err
}

// Publish sends payload to topic and waits for the broker's acknowledgement
// (QoS 1, 2) or the write (QoS 0) under ctx.
func (c *Client) Publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error {
	c.mu.Lock()
	pc, gone := c.pc, c.gone
	c.mu.Unlock()
	return c.publish(ctx, pc, gone, topic, qos, retain, payload)
}

// publish publishes on pc, the connection current when the caller looked,
// and waits for the token; gone closes when pc is lost.
func (c *Client) publish(ctx context.Context, pc paho.Client, gone chan struct{}, topic string, qos byte, retain bool, payload []byte) error {
	if pc == nil || gone == nil || !pc.IsConnectionOpen() {
		return fmt.Errorf("%w: broker %s: publish %s", ErrNotConnected, c.s.url, topic)
	}
	tok := pc.Publish(topic, qos, retain, payload)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("broker %s: publish %s: %w", c.s.url, topic, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("broker %s: publish %s: %w", c.s.url, topic, ctx.Err())
	case <-gone:
		// The next connection is a new paho client: this token would never
		// complete, and the message may or may not have arrived.
		return fmt.Errorf("%w: broker %s: publish %s: connection lost before the acknowledgement", ErrNotConnected, c.s.url, topic)
	}
}

// PublishValue encodes v as a ValueMessage with the session's epoch and
// publishes it.
func (c *Client) PublishValue(ctx context.Context, topic string, qos byte, retain bool, v transports.Value) error {
	// One lock for the epoch and the connection: this runs for every value.
	c.mu.Lock()
	epoch, pc, gone := c.id.Epoch, c.pc, c.gone
	c.mu.Unlock()
	b, err := EncodeValue(v, epoch)
	if err != nil {
		return err
	}
	return c.publish(ctx, pc, gone, topic, qos, retain, b)
}

// PublishStatus publishes the retained status with state and whether the
// session reached ServiceLevelFull. Every later reconcile (after a
// reconnect) publishes it again.
func (c *Client) PublishStatus(ctx context.Context, state string, serviceLevelFull bool) error {
	c.mu.Lock()
	c.status, c.statusFul = state, serviceLevelFull
	c.mu.Unlock()
	return c.Publish(ctx, c.s.statusTopic, 1, true, EncodeStatus(c.statusMessage(c.Identity(), state, serviceLevelFull)))
}

func handler(s *Subscription) paho.MessageHandler {
	return func(_ paho.Client, m paho.Message) {
		s.Handler(Message{Topic: m.Topic(), Payload: m.Payload(), QoS: m.Qos(), Retained: m.Retained(), Duplicate: m.Duplicate(), ack: m.Ack})
		if !s.ManualAck {
			m.Ack()
		}
	}
}

// certRejected tells whether a connect failed on a certificate: our
// verification of the broker's, or the broker's alert about ours. Neither
// improves by retrying within one activation.
func certRejected(err error) bool {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return true
	}
	// A TLS alert from the broker arrives as a net.OpError "remote error"
	// around crypto/tls's unexported alert type: only its text tells.
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" && oe.Err != nil {
		switch oe.Err.Error() {
		case "tls: bad certificate", "tls: unsupported certificate", "tls: revoked certificate",
			"tls: expired certificate", "tls: unknown certificate", "tls: unknown certificate authority",
			"tls: access denied", "tls: certificate required":
			return true
		}
	}
	return false
}

// wait waits for a paho token under ctx.
func wait(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func keys(m map[string]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// dialer opens the network connection for paho under ctx and tracks it,
// so a timeout or Close can close the socket itself instead of waiting
// for paho to notice.
func (c *Client) dialer(ctx context.Context) paho.OpenConnectionFunc {
	return func(u *url.URL, _ paho.ClientOptions) (net.Conn, error) {
		var (
			conn net.Conn
			err  error
		)
		switch u.Scheme {
		case "tcp", "mqtt":
			var d net.Dialer
			conn, err = d.DialContext(ctx, "tcp", u.Host)
		case "ssl", "tls", "mqtts":
			d := tls.Dialer{Config: c.s.tls}
			conn, err = d.DialContext(ctx, "tcp", u.Host)
		case "ws", "wss":
			conn, err = paho.NewWebsocket(u.String(), c.s.tls, c.s.connect, nil, nil)
		default:
			err = fmt.Errorf("%w: scheme %q", ErrConfig, u.Scheme)
		}
		if err != nil {
			return nil, fmt.Errorf("broker %s: dial: %w", c.s.url, err)
		}
		tc := &trackedConn{Conn: conn, c: c}
		c.mu.Lock()
		c.conns[tc] = struct{}{}
		c.mu.Unlock()
		if ctx.Err() != nil {
			_ = tc.Close()
			return nil, fmt.Errorf("broker %s: dial: %w", c.s.url, ctx.Err())
		}
		return tc, nil
	}
}

// trackedConn removes itself from its Client's set when closed.
type trackedConn struct {
	net.Conn
	c    *Client
	once sync.Once
}

func (t *trackedConn) Close() error {
	var err error
	t.once.Do(func() {
		t.c.mu.Lock()
		delete(t.c.conns, t)
		t.c.mu.Unlock()
		err = t.Conn.Close()
	})
	return err
}
