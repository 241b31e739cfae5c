package failover

import (
	"maps"
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// SessionValues is a metric family whose only label is the session: one
// float per session, made into a series at each scrape. A child of a
// prometheus.CounterVec or GaugeVec keeps its label pairs as protobuf
// messages, a creation timestamp and the vector's map entry, several
// hundred bytes per series; a process of 1,000 sessions keeps ten such
// families (bench/sessions_test.go, profiled with LEASEBRIDGE_PROFILE_DIR),
// so here a series is a map entry and one word.
type SessionValues struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	mu   sync.Mutex
	vals map[string]*SessionValue
}

// SessionValue is one session's series of a SessionValues.
type SessionValue struct{ bits atomic.Uint64 }

// Set sets a gauge's value.
func (v *SessionValue) Set(x float64) { v.bits.Store(math.Float64bits(x)) }

// Add adds x, as a counter or a gauge does.
func (v *SessionValue) Add(x float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+x)) {
			return
		}
	}
}

// Inc adds one.
func (v *SessionValue) Inc() { v.Add(1) }

// Value is the series' current value.
func (v *SessionValue) Value() float64 { return math.Float64frombits(v.bits.Load()) }

func sessionCounter(name, help string) *SessionValues {
	return newSessionValues(name, help, prometheus.CounterValue)
}

func sessionGauge(name, help string) *SessionValues {
	return newSessionValues(name, help, prometheus.GaugeValue)
}

func newSessionValues(name, help string, typ prometheus.ValueType) *SessionValues {
	return &SessionValues{desc: prometheus.NewDesc(name, help, []string{"session"}, nil), typ: typ, vals: map[string]*SessionValue{}}
}

// WithLabelValues is the session's series, made at zero on first use, as
// a prometheus vector's child is.
func (c *SessionValues) WithLabelValues(session string) *SessionValue {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vals[session]
	if !ok {
		v = &SessionValue{}
		c.vals[session] = v
	}
	return v
}

// Describe sends the family's description.
func (c *SessionValues) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect sends every session's series, from a copy of the map taken
// under the lock so that a scrape never holds up a session.
func (c *SessionValues) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	vals := maps.Clone(c.vals)
	c.mu.Unlock()
	for session, v := range vals {
		ch <- prometheus.MustNewConstMetric(c.desc, c.typ, v.Value(), session)
	}
}
