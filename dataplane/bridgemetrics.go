package dataplane

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// BridgeCounters exports the counters of the bridges a process runs as
// leasebridge_bridge_forwarded_total and leasebridge_bridge_dropped_total.
// It is a Collector: it reads each running bridge's counters at scrape
// time (no goroutine per bridge) and keeps what earlier terms counted, so
// the series stay monotonic across takeovers.
type BridgeCounters struct {
	forwarded, dropped *prometheus.Desc

	mu     sync.Mutex
	routes map[bridgeKey]*bridgeTotals
}

type bridgeKey struct{ session, route string }

// bridgeTotals are what ended terms forwarded and dropped, plus the
// bridges running now.
type bridgeTotals struct {
	in, out, dropped int64
	live             map[*mqtt.Bridge]bool
}

// NewBridgeCounters makes the collector; register it once per process.
func NewBridgeCounters() *BridgeCounters {
	return &BridgeCounters{
		forwarded: prometheus.NewDesc("leasebridge_bridge_forwarded_total",
			"Messages a bridge route forwarded and its target broker acknowledged, by direction (in: remote to local, out: local to remote).",
			[]string{"session", "route", "direction"}, nil),
		dropped: prometheus.NewDesc("leasebridge_bridge_dropped_total",
			"QoS 0 messages a bridge route dropped because its forwarding queue was full (docs/bridged-data.md); loss inside a broker is not counted.",
			[]string{"session", "route"}, nil),
		routes: map[bridgeKey]*bridgeTotals{},
	}
}

// Declare makes a route's series exist at zero before its first term.
func (c *BridgeCounters) Declare(session, route string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.totals(bridgeKey{session, route})
}

// DeclareRoutes declares the session's bridge routes.
func (c *BridgeCounters) DeclareRoutes(session string, rs []*routes.Route) {
	for _, r := range rs {
		if r.Kind == routes.RouteBridge {
			c.Declare(session, r.Name)
		}
	}
}

func (c *BridgeCounters) totals(k bridgeKey) *bridgeTotals {
	t := c.routes[k]
	if t == nil {
		t = &bridgeTotals{live: map[*mqtt.Bridge]bool{}}
		c.routes[k] = t
	}
	return t
}

// Track counts b's messages under session from now on; the returned
// function, called when b stopped running, folds its final counts into
// the route's totals.
func (c *BridgeCounters) Track(session string, b *mqtt.Bridge) func() {
	k := bridgeKey{session, b.Name()}
	c.mu.Lock()
	c.totals(k).live[b] = true
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		t := c.totals(k)
		in, out := b.Forwarded()
		t.in, t.out, t.dropped = t.in+in, t.out+out, t.dropped+b.Dropped()
		delete(t.live, b)
	}
}

// Describe implements prometheus.Collector.
func (c *BridgeCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.forwarded
	ch <- c.dropped
}

// Collect implements prometheus.Collector.
func (c *BridgeCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, t := range c.routes {
		in, out, dropped := t.in, t.out, t.dropped
		for b := range t.live {
			i, o := b.Forwarded()
			in, out, dropped = in+i, out+o, dropped+b.Dropped()
		}
		ch <- prometheus.MustNewConstMetric(c.forwarded, prometheus.CounterValue, float64(in), k.session, k.route, mqtt.In)
		ch <- prometheus.MustNewConstMetric(c.forwarded, prometheus.CounterValue, float64(out), k.session, k.route, mqtt.Out)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(dropped), k.session, k.route)
	}
}
