// Package transports defines the contract every exclusive connection of a
// session fulfils (MQTT broker paths and device protocols) and the registry
// through which each transport package makes itself available.
//
// A transport is opened only by the owner of the session's lease, under the
// owner context the lease manager cancels at the self-fence deadline, and
// must finish activating within the activation bound it disclosed to
// admission. Transports never import the lease package.
//
// A device transport embeds Conn, that owner-bound lifecycle (guarded
// requests, close within the bound at the fence, the State rule), and
// Catalog, the checks and lookups of its groups and tags, so its own
// package holds only the protocol; package transporttest is the
// conformance suite each one runs.
package transports

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/routes"
)

// Transport is one connection a session opens while it owns its lease.
type Transport interface {
	// Name identifies the transport in logs and metrics, e.g. "mqtt:local".
	Name() string
	// ActivationBound is the longest Open may take; admission adds it to
	// the session's activation term.
	ActivationBound() time.Duration
	// CloseBound is the longest Close may take; admission subtracts it from
	// the self-fence deadline.
	CloseBound() time.Duration
	// Open connects and activates the transport and returns within
	// ActivationBound, which the transport enforces itself (the supervisor
	// also abandons and closes an Open that overruns it). ctx is the owner
	// context, without a deadline: when it is cancelled every connection
	// opened under it is closed at once.
	Open(ctx context.Context) error
	// Close releases every connection within CloseBound. It is safe after a
	// failed Open and when called twice.
	Close(ctx context.Context) error
	// State reports whether the transport is converged (connected and fully
	// set up) and since when.
	State() State
}

// Explained is a Transport that discloses the configuration keys its
// ActivationBound adds up, so admission can say which key to change; each
// part's Count x Each, summed, is the bound.
type Explained interface {
	ActivationParts() []admission.Part
}

// State is a transport's convergence and the instant it last changed.
type State struct {
	Converged bool
	Since     time.Time
	// Err is the reason the transport is not converged, if known.
	Err error
}

// Next is the state after a connection attempt or request that succeeded
// (ok) or failed with err: Since moves only when convergence changes, or
// when a failure's reason does.
func (s State) Next(ok bool, err error) State {
	if s.Converged != ok || (!ok && s.Err != err) {
		return State{Converged: ok, Since: time.Now(), Err: err}
	}
	return s
}

// Quality tells whether a value was read successfully.
type Quality string

// Qualities of a value.
const (
	Good Quality = "good"
	Bad  Quality = "bad"
)

// Value is one tag's reading (or its failure) at an instant.
type Value struct {
	Tag       string
	Value     any
	Quality   Quality
	Err       error
	Timestamp time.Time
}

// Poller is a device transport that reads a named poll group.
type Poller interface {
	Transport
	// Poll reads every tag of the group; a tag that fails carries Bad
	// quality and its error, the call fails only if the device is gone.
	Poll(ctx context.Context, group string) ([]Value, error)
}

// Notifier is a device transport that also pushes values, such as an OPC
// UA subscription: f receives every value as it is delivered, with its
// group, on the transport's goroutine, and must not block. Poll of such a
// group returns the latest delivered values.
type Notifier interface {
	SetNotify(f func(group string, v Value))
}

// Writer is a device transport that writes one tag.
type Writer interface {
	Transport
	Write(ctx context.Context, tag string, value any) error
}

// Factory builds a transport from its configuration. cfg is the
// configuration type the registering package documents.
type Factory func(name string, cfg any) (Transport, error)

// ErrUnknownKind reports a kind no transport package registered.
var ErrUnknownKind = errors.New("transports: unknown kind")

var (
	mu       sync.RWMutex
	registry = map[string]Factory{}
)

// Register makes a transport kind available; transport packages call it
// from init. Registering a kind twice panics: it is a programming error.
func Register(kind string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[kind]; dup {
		panic(fmt.Sprintf("transports: kind %q registered twice", kind))
	}
	registry[kind] = f
}

// RegisterDevice is a device kind's one registration, from its package's
// init: kind, its configuration, goes to routes.RegisterKind (decoding,
// validation, endpoints), and build, its transport built from a
// *routes.Device, to this package's registry under kind.Name, so the two
// can never name different kinds. Any configuration other than a
// *routes.Device is refused with errs.Config naming the transport.
func RegisterDevice[T Transport](kind routes.DeviceKind, errs DeviceErrors, build func(name string, dev *routes.Device) (T, error)) {
	routes.RegisterKind(kind)
	Register(kind.Name, func(name string, cfg any) (Transport, error) {
		dev, ok := cfg.(*routes.Device)
		if !ok {
			return nil, fmt.Errorf("%w: transport %q: configuration is %T, want *routes.Device", errs.Config, name, cfg)
		}
		t, err := build(name, dev)
		if err != nil {
			return nil, err // not a Transport holding a nil pointer
		}
		return t, nil
	})
}

// New builds a transport of a registered kind.
func New(kind, name string, cfg any) (Transport, error) {
	mu.RLock()
	f, ok := registry[kind]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %v)", ErrUnknownKind, kind, Kinds())
	}
	return f(name, cfg)
}

// Kinds lists the registered kinds in order.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	ks := make([]string, 0, len(registry))
	for k := range registry {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

type guardKey struct{}

// guard is the check WithGuard attaches; contexts derived from one
// another share the same *guard, so GuardRequest can tell that the
// request's and the owner's guard are one check.
type guard struct{ check func() error }

// ErrGuard reports a request that was not sent because the context's guard
// refused it.
var ErrGuard = errors.New("transports: request refused by the owner guard")

// WithGuard returns a context carrying check. Every device transport calls
// Guard with the context of each request right before that request goes on
// the wire; a non-nil error means it must not be sent. The supervisor's
// check is the owner's fence deadline read from a clock that counts
// suspend, so a process that was frozen or suspended past its deadline
// sends nothing after it resumes, even before the owner context has been
// cancelled. The value survives derived contexts (timeouts, cancels).
func WithGuard(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, guardKey{}, &guard{check: check})
}

func guardOf(ctx context.Context) *guard {
	g, _ := ctx.Value(guardKey{}).(*guard)
	return g
}

func (g *guard) run() error {
	if g == nil || g.check == nil {
		return nil
	}
	if err := g.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrGuard, err)
	}
	return nil
}

// Guard runs the guard ctx carries; nil without one.
func Guard(ctx context.Context) error { return guardOf(ctx).run() }

// GuardRequest is the check a device transport runs right before each
// request goes on the wire: the guard of the request's context, then that
// of owner, the owner context the transport was opened with (nil before
// Open), so a process frozen past its fence deadline sends nothing when it
// resumes, whichever of the two carries the guard. When the request's
// context derives from the owner context (a poller's does) both carry the
// same guard, and it runs once.
func GuardRequest(ctx, owner context.Context) error {
	g := guardOf(ctx)
	if err := g.run(); err != nil {
		return err
	}
	if owner != nil {
		if og := guardOf(owner); og != g {
			return og.run()
		}
	}
	return nil
}
