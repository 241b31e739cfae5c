package transports

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// DeviceErrors are a device package's sentinels that Conn and Catalog
// wrap, so every error a transport returns still names its own package.
type DeviceErrors struct {
	// Config: an invalid configuration, or Open called twice.
	Config error
	// Closed: the transport is closed or its owner context has ended.
	Closed error
	// NotOpen: a request before Open.
	NotOpen error
	// Connect: a connection attempt failed.
	Connect error
	// Timeout: no reply within the request timeout.
	Timeout error
	// IO: the connection broke during a request.
	IO error
	// UnknownGroup: a poll of a group the device does not define.
	UnknownGroup error
	// UnknownTag: a write to a tag the device does not define.
	UnknownTag error
	// ReadOnly: a write to a tag not marked writable.
	ReadOnly error
	// Value: a written value that does not fit its tag.
	Value error
}

// NewDeviceErrors returns the sentinels of device package pkg, each
// reading "pkg: ..."; UnknownTag, ReadOnly and Value also match the
// refusals ErrUnknownTag, ErrReadOnly and ErrBadValue with errors.Is.
func NewDeviceErrors(pkg string) DeviceErrors {
	e := func(text string) error { return errors.New(pkg + ": " + text) }
	return DeviceErrors{
		Config: e("invalid configuration"), Closed: e("transport closed"), NotOpen: e("transport not open"),
		Connect: e("connect failed"), Timeout: e("request timed out"), IO: e("connection failed"),
		UnknownGroup: e("unknown poll group"),
		UnknownTag:   Sentinel(pkg+": unknown tag", ErrUnknownTag),
		ReadOnly:     Sentinel(pkg+": tag not writable", ErrReadOnly),
		Value:        Sentinel(pkg+": invalid value", ErrBadValue),
	}
}

// ConnConfig describes one device connection to NewConn.
type ConnConfig[C comparable] struct {
	// Name is the device's name, used in every error.
	Name string
	// Where names the device's address in errors, e.g. "10.0.0.5:502".
	Where string
	// ConnectTimeout, RequestTimeout and CloseTimeout are the device's
	// bounds: activation is one connect and one request.
	ConnectTimeout, RequestTimeout, CloseTimeout time.Duration
	Errors                                       DeviceErrors
	// Dial makes a connection; ctx ends at connect_timeout, at Close and
	// when the owner context ends.
	Dial func(ctx context.Context) (C, error)
	// Hangup closes a connection without waiting for the device, from any
	// goroutine, more than once; it interrupts a request in flight.
	Hangup func(C)
	// Alive, if set, tells whether the current connection is still usable;
	// one that is not is dropped and replaced.
	Alive func(C) bool
}

// Conn is the owner-bound lifecycle every device transport shares: the
// connection lives only while the owner context given to Open does and
// is closed within the close bound when it ends or Close is called, a
// connect in flight included; every request is guarded right before it
// goes on the wire; State follows State.Next. A transport embeds *Conn
// and keeps only its protocol. Requests are serialized with Lock.
type Conn[C comparable] struct {
	cfg ConnConfig[C]

	// io serializes requests and connection changes.
	io sync.Mutex

	// mu guards the fields below; it is never held during I/O, so the
	// owner context can close the connection while a request is in flight.
	mu        sync.Mutex
	cur       C
	owner     context.Context
	stopOwner func() bool
	closed    bool
	// life ends when the transport closes; it cancels a dial in progress
	// so Close leaves no connection being made behind it.
	life    context.Context
	endLife context.CancelFunc
	state   State
	watch   *watch[C] // the context of the latest request, see watchFor
}

// NewConn returns the lifecycle of an unopened connection.
func NewConn[C comparable](cfg ConnConfig[C]) *Conn[C] {
	k := &Conn[C]{cfg: cfg, state: State{Since: time.Now(), Err: cfg.Errors.NotOpen}}
	k.life, k.endLife = context.WithCancel(context.Background())
	return k
}

// Name identifies the transport.
func (k *Conn[C]) Name() string { return k.cfg.Name }

// ActivationBound is connect_timeout plus request_timeout: one connect
// and the first request.
func (k *Conn[C]) ActivationBound() time.Duration {
	return k.cfg.ConnectTimeout + k.cfg.RequestTimeout
}

// ActivationParts are the keys ActivationBound is made of.
func (k *Conn[C]) ActivationParts() []admission.Part {
	return []admission.Part{
		{Key: "connect_timeout", Count: 1, Each: k.cfg.ConnectTimeout},
		{Key: "request_timeout", Count: 1, Each: k.cfg.RequestTimeout},
	}
}

// CloseBound is close_timeout; closing does not wait for the device.
func (k *Conn[C]) CloseBound() time.Duration { return k.cfg.CloseTimeout }

// RequestTimeout bounds one request.
func (k *Conn[C]) RequestTimeout() time.Duration { return k.cfg.RequestTimeout }

// State reports whether the connection is up and its last request
// succeeded.
func (k *Conn[C]) State() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state
}

// SetState records a request's outcome; after Close it does nothing, so
// an interrupted request does not overwrite the reason for closing.
func (k *Conn[C]) SetState(ok bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.closed {
		k.state = k.state.Next(ok, err)
	}
}

// Lock serializes requests: hold it around every use of the connection.
func (k *Conn[C]) Lock() { k.io.Lock() }

// Unlock ends what Lock began.
func (k *Conn[C]) Unlock() { k.io.Unlock() }

// Done is closed when the transport closes.
func (k *Conn[C]) Done() <-chan struct{} { return k.life.Done() }

// Owner is the owner context given to Open; nil before.
func (k *Conn[C]) Owner() context.Context {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.owner
}

// Open binds the connection to the owner context ctx and runs activate
// under Lock with a context ending at ActivationBound. When ctx ends the
// connection, and every reconnection after it, is closed at once.
func (k *Conn[C]) Open(ctx context.Context, activate func(actx context.Context) error) error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return fmt.Errorf("%w: device %q", k.cfg.Errors.Closed, k.cfg.Name)
	}
	if k.owner != nil {
		k.mu.Unlock()
		return fmt.Errorf("%w: device %q: opened twice", k.cfg.Errors.Config, k.cfg.Name)
	}
	k.owner = ctx
	k.stopOwner = context.AfterFunc(ctx, func() {
		k.shut(fmt.Errorf("%w: device %q: owner context ended: %w", k.cfg.Errors.Closed, k.cfg.Name, context.Cause(ctx)))
	})
	k.mu.Unlock()

	actx, cancel := context.WithTimeout(ctx, k.ActivationBound())
	defer cancel()
	k.io.Lock()
	defer k.io.Unlock()
	return activate(actx)
}

// Close closes the connection, interrupting a request in flight rather
// than waiting for it, so it returns within CloseBound. It is safe after a
// failed Open and when called twice.
func (k *Conn[C]) Close(context.Context) error {
	k.mu.Lock()
	stop := k.stopOwner
	k.mu.Unlock()
	if stop != nil {
		stop()
	}
	k.shut(fmt.Errorf("%w: device %q", k.cfg.Errors.Closed, k.cfg.Name))
	return nil
}

// shut closes the transport for good.
func (k *Conn[C]) shut(reason error) {
	var zero C
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	k.endLife()
	c, w := k.cur, k.watch
	k.cur, k.watch = zero, nil
	k.state = k.state.Next(false, reason)
	k.mu.Unlock()
	if c != zero {
		k.cfg.Hangup(c)
	}
	w.stopWatching()
}

// Held returns the connection held now, the zero C when there is none.
func (k *Conn[C]) Held() C {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// Closed reports whether the transport has closed.
func (k *Conn[C]) Closed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}

// Current returns the live connection, dialling one under ctx and the
// owner context if there is none; fresh tells that it was just made. The
// caller holds Lock.
func (k *Conn[C]) Current(ctx context.Context) (c C, fresh bool, err error) {
	var zero C
	k.mu.Lock()
	owner, closed, cur := k.owner, k.closed, k.cur
	k.mu.Unlock()
	switch {
	case closed:
		return zero, false, fmt.Errorf("%w: device %q", k.cfg.Errors.Closed, k.cfg.Name)
	case owner == nil:
		return zero, false, fmt.Errorf("%w: device %q", k.cfg.Errors.NotOpen, k.cfg.Name)
	case cur != zero && (k.cfg.Alive == nil || k.cfg.Alive(cur)):
		return cur, false, nil
	case cur != zero:
		k.Drop(cur)
	}
	if err := GuardRequest(ctx, owner); err != nil {
		return zero, false, fmt.Errorf("device %q: connect: %w", k.cfg.Name, err)
	}
	if c, err = k.dial(ctx, owner); err != nil {
		return zero, false, err
	}
	k.mu.Lock()
	if k.closed {
		// Closed while dialling.
		k.mu.Unlock()
		k.cfg.Hangup(c)
		return zero, false, fmt.Errorf("%w: device %q", k.cfg.Errors.Closed, k.cfg.Name)
	}
	k.cur = c
	k.mu.Unlock()
	return c, true, nil
}

// dial runs cfg.Dial within connect_timeout, ended early by Close and by
// the owner context.
func (k *Conn[C]) dial(ctx, owner context.Context) (C, error) {
	dctx, cancel := context.WithTimeout(ctx, k.cfg.ConnectTimeout)
	defer cancel()
	stopLife := context.AfterFunc(k.life, cancel)
	defer stopLife()
	stopOwner := context.AfterFunc(owner, cancel)
	defer stopOwner()
	c, err := k.cfg.Dial(dctx)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		err = fmt.Errorf("%w: device %q at %s: %w", k.cfg.Errors.Connect, k.cfg.Name, k.cfg.Where, err)
		k.SetState(false, err)
	}
	return c, err
}

// Drop closes c and forgets it if it is still the current connection.
func (k *Conn[C]) Drop(c C) {
	var zero C
	k.mu.Lock()
	if k.cur == c {
		k.cur = zero
	}
	k.mu.Unlock()
	k.cfg.Hangup(c)
}

// DropCurrent closes the current connection, if any.
func (k *Conn[C]) DropCurrent() {
	var zero C
	if c := k.Held(); c != zero {
		k.Drop(c)
	}
}

// Guard is the check right before a request goes on the wire: the guards
// of ctx and of the owner context (see GuardRequest).
func (k *Conn[C]) Guard(ctx context.Context) error { return GuardRequest(ctx, k.Owner()) }

// Begin guards a request about to go on c and arranges for the end of ctx
// to close c while the request is in flight; call end when the reply is
// in. An error means nothing was sent and c is as good as before. The
// caller holds Lock.
func (k *Conn[C]) Begin(ctx context.Context, c C, what string) (end func(), err error) {
	return k.BeginOp(ctx, c, text(what))
}

// text is a request name already formatted.
type text string

func (t text) String() string { return string(t) }

// BeginOp is Begin for a request named by what, formatted only when an
// error needs it: a poller begins a request every interval, and a name
// formatted up front is an fmt.Sprintf per request that almost never
// reaches an error.
func (k *Conn[C]) BeginOp(ctx context.Context, c C, what fmt.Stringer) (end func(), err error) {
	if err := k.Guard(ctx); err != nil {
		return nil, fmt.Errorf("device %q: %s: %w", k.cfg.Name, what, err)
	}
	w := k.watchFor(ctx)
	if !w.begin(c) {
		return nil, fmt.Errorf("device %q: %s: %w", k.cfg.Name, what, context.Cause(ctx))
	}
	return w.end, nil
}

// Failed drops c after a request on it failed with err and returns the
// error to report: the transport closed under it, ctx ended, the request
// timed out (timedOut, as the protocol tells it), or the connection
// broke. An answer that refuses the request is not a failure: the device
// answered, so the caller keeps the connection.
func (k *Conn[C]) Failed(ctx context.Context, c C, what string, err error, timedOut bool) error {
	k.Drop(c)
	name, where := k.cfg.Name, k.cfg.Where
	switch {
	case k.Closed():
		err = fmt.Errorf("%w: device %q: %s interrupted: %w", k.cfg.Errors.Closed, name, what, err)
	case ctx.Err() != nil:
		err = fmt.Errorf("device %q: %s: %w", name, what, context.Cause(ctx))
	case timedOut:
		err = fmt.Errorf("%w: device %q at %s: %s: no reply within %v", k.cfg.Errors.Timeout, name, where, what, k.cfg.RequestTimeout)
	default:
		err = fmt.Errorf("%w: device %q at %s: %s: %w", k.cfg.Errors.IO, name, where, what, err)
	}
	k.SetState(false, err)
	return err
}

// watch closes the connection of the request in flight when the context
// the requests run under ends. It stays registered on that context from
// one request to the next (a poller polls under one context for as long
// as it runs): an AfterFunc registered per request cost more than the rest
// of a Modbus request's bookkeeping together.
type watch[C comparable] struct {
	done   <-chan struct{} // the context's Done, which identifies it
	ctx    context.Context
	stop   func() bool
	hangup func(C)

	mu   sync.Mutex
	busy C // the connection of the request in flight, zero between requests
}

// watchFor returns the watch of ctx, replacing that of an earlier
// context; nil when ctx never ends. The caller holds Lock.
func (k *Conn[C]) watchFor(ctx context.Context) *watch[C] {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	k.mu.Lock()
	old := k.watch
	if old != nil && old.done == done {
		k.mu.Unlock()
		return old
	}
	k.mu.Unlock()
	w := &watch[C]{done: done, ctx: ctx, hangup: k.cfg.Hangup}
	w.stop = context.AfterFunc(ctx, w.interrupt)
	k.mu.Lock()
	if k.closed {
		// Close ran meanwhile: keep nothing registered behind it.
		k.mu.Unlock()
		w.stopWatching()
		return w
	}
	k.watch = w
	k.mu.Unlock()
	old.stopWatching()
	return w
}

// begin marks a request on c in flight; false means the context has
// ended and the request must not be sent.
func (w *watch[C]) begin(c C) bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	w.busy = c
	w.mu.Unlock()
	// Err is set before the AfterFunc runs: either the context ended
	// before busy was set and this sees it, or interrupt sees busy.
	if w.ctx.Err() != nil {
		w.end()
		return false
	}
	return true
}

// end marks the request finished.
func (w *watch[C]) end() {
	if w == nil {
		return
	}
	var zero C
	w.mu.Lock()
	w.busy = zero
	w.mu.Unlock()
}

// interrupt runs when the context ends.
func (w *watch[C]) interrupt() {
	var zero C
	w.mu.Lock()
	c := w.busy
	w.mu.Unlock()
	if c != zero {
		w.hangup(c)
	}
}

func (w *watch[C]) stopWatching() {
	if w != nil {
		w.stop()
	}
}
