// Package dataplane is what runs inside one ownership term of a session:
// the pollers that publish device values, the write routes that execute
// requests on the device (writes.go), and the bridge routes between
// brokers. It knows nothing of leases: the control plane (failover) hands
// it the term's transports, an owner guard to check before every device
// request, and an Env through which it reports device health, counts its
// errors and outcomes, and says when a poll route published its first good
// value.
//
// A polled value goes device -> poller.once -> Publisher.PublishValue; a
// write request goes broker -> writer.enqueue -> writer.run ->
// transports.Writer -> writer.publishReplies.
package dataplane

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// Guard is the owner guard: Valid reports whether the term may still do
// I/O (its fence deadline has not passed). *lease.Owner is one.
type Guard interface {
	Valid() bool
}

// Counters counts the data plane's errors and outcomes under the term's
// session; the control plane's metrics implement it.
type Counters interface {
	// TransportError counts one failed operation (poll, publish, write)
	// of the named transport.
	TransportError(transport, op string)
	// WriteOutcome counts one write request of route by its outcome.
	WriteOutcome(route, outcome string)
	// TrackBridge counts b's messages from now on; the returned function
	// is called once b stopped.
	TrackBridge(b *mqtt.Bridge) (stopped func())
	// Values are the poll route's counts of values read from its device
	// and of values its local broker accepted; a poller looks them up
	// once, not per value, because a lookup by labels per value would
	// cost the data plane throughput.
	Values(route string) (polled, published Counter)
}

// Counter is one monotonic count; a prometheus.Counter is one.
type Counter interface {
	Add(float64)
}

// DeviceHealth hears every attempt to reach a device: err nil means it
// answered. The control plane's path tracker implements it and steps the
// session down when a device stays unreachable.
type DeviceHealth interface {
	Device(name string, err error, now time.Time)
}

// Publisher is the local broker as a poller and a write route use it.
// *mqtt.Client is one.
type Publisher interface {
	// Name names the broker in logs and metrics.
	Name() string
	// PublishValue publishes one polled value.
	PublishValue(ctx context.Context, topic string, qos byte, retain bool, v transports.Value) error
	// Publish publishes a raw payload (write replies, cleared requests).
	Publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error
}

// Env is what the data plane of one term reports to the control plane.
type Env interface {
	Counters
	DeviceHealth
	// Log is the session's logger.
	Log() *slog.Logger
	// Published records a poll route's first good value: the term
	// reaches ServiceLevelFull once every poll route has one.
	Published(route string)
}

// Work is the running route workers of a term.
type Work struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Stop asks every worker to end.
func (w *Work) Stop() { w.cancel() }

// Wait waits until every worker has ended (after Stop, or the end of the
// context Start was given).
func (w *Work) Wait() { w.wg.Wait() }

// Start starts the term's pollers, writers and bridges on its opened
// transports, until ctx ends or Stop. Every device request is preceded by
// a check of guard.
func (t *Term) Start(ctx context.Context, guard Guard) *Work {
	wctx, cancel := context.WithCancel(ctx)
	w := &Work{cancel: cancel}
	t.startPollers(wctx, guard, &w.wg)
	for _, wr := range t.writers {
		w.wg.Add(1)
		go func() { defer w.wg.Done(); wr.run(wctx, guard.Valid) }()
	}
	for _, b := range t.bridges {
		w.wg.Add(1)
		go func() { defer w.wg.Done(); defer t.spec.Env.TrackBridge(b)(); _ = b.Run(wctx) }()
	}
	return w
}

// startPollers starts a poller per poll group of every poll route.
// Pollers of pushed (subscribed) groups are kicked by their device, by
// device and group: a pushed value is published at once, not at the
// group's next interval.
func (t *Term) startPollers(ctx context.Context, guard Guard, wg *sync.WaitGroup) {
	pushed := map[string]map[string][]*poller{}
	for _, r := range t.spec.Routes {
		if r.Kind != routes.RoutePoll {
			continue
		}
		dev, ok := t.Devices[r.Device].(transports.Poller)
		if !ok {
			t.spec.Env.Log().Error("device cannot be polled", "route", r.Name, "device", r.Device, "epoch", t.spec.Epoch)
			continue
		}
		route := r
		polled, published := t.spec.Env.Values(r.Name)
		var once sync.Once
		onGood := func() { once.Do(func() { t.spec.Env.Published(route.Name) }) }
		for _, g := range t.spec.Config.Devices[r.Device].Groups {
			if len(r.Groups) > 0 && !slices.Contains(r.Groups, g.Name) {
				continue
			}
			p := newPoller(t, r, g, dev, onGood)
			p.polled, p.published = polled, published
			p.start(ctx, guard.Valid, wg)
			if _, ok := dev.(transports.Notifier); ok && g.Mode == "subscribe" {
				if pushed[r.Device] == nil {
					pushed[r.Device] = map[string][]*poller{}
				}
				pushed[r.Device][g.Name] = append(pushed[r.Device][g.Name], p)
			}
		}
	}
	for name, groups := range pushed {
		t.Devices[name].(transports.Notifier).SetNotify(func(group string, _ transports.Value) {
			for _, p := range groups[group] {
				p.kick()
			}
		})
	}
}
