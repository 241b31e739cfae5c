package dataplane

import (
	"fmt"
	"slices"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// Spec says what one term of a session is built from.
type Spec struct {
	// Config is the loaded configuration.
	Config *routes.Config
	// Session names the session; Routes are its routes, in file order.
	Session string
	Routes  []*routes.Route
	// Node is this node's name, for the MQTT client ids.
	Node string
	// Owner and Epoch are the term's lease identity, stamped on status
	// messages and write replies; empty in preflight.
	Owner string
	Epoch uint64
	// Device builds the transport of the device entry name; a term
	// builds its own (NewDevice), preflight hands in the ones it built.
	Device func(name string, dev *routes.Device) (transports.Transport, error)
	// AllowMissing builds a broker whose TLS or password input is missing
	// (mqtt.Config.AllowMissingInputs): admit, away from the deployment.
	AllowMissing bool
	// Env hears what the term's workers do; nil in preflight, where
	// nothing runs.
	Env Env
}

// Opened is one transport of a term, in the order it is opened.
type Opened struct {
	T transports.Transport
	// IsMQTT is true for a broker, false for a device.
	IsMQTT bool
	// Name is the device's or broker's configuration name.
	Name string
}

// Term is one term's transports and route workers, built and not yet
// opened. A term's transports are built fresh, used once and closed;
// nothing survives into the next term.
type Term struct {
	spec Spec
	// Devices and Brokers are the transports by configuration name.
	Devices map[string]transports.Transport
	Brokers map[string]*mqtt.Client
	// Order is the open order: devices, remote brokers, local brokers.
	Order   []Opened
	writers []*writer
	bridges []*mqtt.Bridge
}

// NewDevice builds the transport of the device entry name.
func NewDevice(name string, dev *routes.Device) (transports.Transport, error) {
	return transports.New(dev.Kind, dev.Kind+":"+name, dev)
}

// EntryError is a transport that could not be built from its
// configuration entry; Path is the entry's key path (devices.NAME,
// brokers.NAME, routes[i]), so the error can point at its line.
type EntryError struct {
	Path, What string
	Err        error
}

// Error names the entry and what went wrong.
func (e *EntryError) Error() string { return e.What + ": " + e.Err.Error() }

// Unwrap is the transport's error.
func (e *EntryError) Unwrap() error { return e.Err }

// Build creates the term's transports and registers every subscription;
// nothing is connected yet.
func Build(sp Spec) (*Term, error) {
	t := &Term{spec: sp, Devices: map[string]transports.Transport{}, Brokers: map[string]*mqtt.Client{}}
	devs, brokers := t.transportNames()
	for _, name := range devs {
		tr, err := sp.Device(name, sp.Config.Devices[name])
		if err != nil {
			return nil, &EntryError{Path: "devices." + name, What: fmt.Sprintf("session %s: device %s", sp.Session, name), Err: err}
		}
		t.Devices[name] = tr
		t.Order = append(t.Order, Opened{T: tr, Name: name})
	}
	for _, name := range brokers {
		c, err := t.broker(name)
		if err != nil {
			return nil, &EntryError{Path: "brokers." + name, What: fmt.Sprintf("session %s: broker %s", sp.Session, name), Err: err}
		}
		if !slices.ContainsFunc(t.Order, func(o Opened) bool { return o.T == c }) {
			t.Order = append(t.Order, Opened{T: c, IsMQTT: true, Name: name})
		}
	}
	if err := t.wire(); err != nil {
		return nil, err
	}
	return t, nil
}

// transportNames lists the session's devices and then its brokers,
// remote brokers before local ones, as routes.Config.Sessions lists them.
func (t *Term) transportNames() (devs, brokers []string) {
	var remotes, locals []string
	seen := map[string]bool{}
	add := func(list *[]string, key string) {
		if !seen[key] {
			seen[key] = true
			*list = append(*list, key)
		}
	}
	for _, r := range t.spec.Routes {
		switch r.Kind {
		case routes.RoutePoll, routes.RouteWrite:
			add(&devs, r.Device)
		case routes.RouteBridge:
			add(&remotes, r.Remote)
		}
		add(&locals, r.Broker)
	}
	return devs, append(remotes, locals...)
}

// broker returns the session's client of the broker entry name, built on
// first use.
func (t *Term) broker(name string) (*mqtt.Client, error) {
	if c, ok := t.Brokers[name]; ok {
		return c, nil
	}
	sp := t.spec
	c, err := mqtt.New("mqtt:"+name, mqtt.Config{Broker: *sp.Config.Brokers[name], Session: sp.Session, Node: sp.Node,
		CleanSession: cleanSession(name), AllowMissingInputs: sp.AllowMissing})
	if err != nil {
		return nil, err
	}
	c.SetIdentity(mqtt.Identity{Owner: sp.Owner, Epoch: sp.Epoch})
	t.Brokers[name] = c
	return c, nil
}

// wire builds the write routes' writers, subscribed to their request
// topics, and the bridge routes' bridges.
func (t *Term) wire() error {
	cfg := t.spec.Config
	for _, r := range t.spec.Routes {
		switch r.Kind {
		case routes.RouteWrite:
			w := newWriter(t, r)
			t.writers = append(t.writers, w)
			// Acknowledged only once answered (docs/writes.md).
			if err := t.Brokers[r.Broker].Subscribe(mqtt.Subscription{Filter: r.RequestTopic, QoS: byte(r.QoS), ManualAck: true, Handler: w.enqueue}); err != nil {
				return t.routeError(r, err)
			}
		case routes.RouteBridge:
			b, err := mqtt.NewBridge(r.Name, t.Brokers[r.Remote], t.Brokers[r.Broker], r.Topics)
			if err != nil {
				return t.routeError(r, err)
			}
			b.RefuseRetainedInto(commandFilters(cfg, r.Broker), commandFilters(cfg, r.Remote))
			t.bridges = append(t.bridges, b)
		}
	}
	return nil
}

func (t *Term) routeError(r *routes.Route, err error) error {
	return &EntryError{Path: fmt.Sprintf("routes[%d]", slices.Index(t.spec.Config.Routes, r)),
		What: fmt.Sprintf("session %s: route %s", t.spec.Session, r.Name), Err: err}
}

// cleanSession decides whether the session's MQTT session on a broker is
// discarded at every connect: never. Bridge traffic and write requests
// published while no owner is connected wait on the broker for the next
// owner (same client id); a write request is judged by its age when it
// arrives (docs/writes.md), so a queued command is executed only while
// fresh.
func cleanSession(string) bool { return false }
