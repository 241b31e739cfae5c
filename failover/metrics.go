package failover

import (
	"maps"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/internal/buildinfo"
)

// Metrics are the Prometheus series of a running bridge; docs/operations.md
// lists them.
type Metrics struct {
	// FailureToFull is FailureToFullDuration by cause (failureToFull).
	FailureToFull *prometheus.HistogramVec
	// State is 1 for the session's current state and 0 for the others.
	State *SessionStates
	// Epoch is the lease epoch the session last owned.
	Epoch *SessionValues
	// RenewFailures counts failed renew calls.
	RenewFailures *SessionValues
	// StepDowns counts broker-path step-downs.
	StepDowns *SessionValues
	// Budget is each session's admitted budget per failure mode.
	Budget *prometheus.GaugeVec
	// TransportErrors counts transport open, poll, write and publish errors.
	TransportErrors *prometheus.CounterVec
	// Takeovers counts the times this process became a session's owner.
	Takeovers *SessionValues
	// ClaimConflicts is 1 while a device endpoint of the session is
	// claimed under another key_prefix or session and the term waits.
	ClaimConflicts *SessionValues
	// TimingMismatch is 1 while the row's owner runs a lease timing other
	// than this node's.
	TimingMismatch *SessionValues
	// TimingMismatches counts the distinct owner timings seen that differ
	// from this node's.
	TimingMismatches *SessionValues
	// SessionUnowned is 1 while no node owns the session, as this node
	// observes the row (released, or unchanged for its owner's lease_ttl):
	// for a pinned session, every eligible node is down or draining.
	SessionUnowned *SessionValues
	// StoreUp is 1 while the lease store answers this process's probe.
	StoreUp prometheus.Gauge
	// WriteRequests counts write requests by outcome (the reply code).
	WriteRequests *prometheus.CounterVec
	// DeviceUp is 1 while an owned session's device answers, 0 while it
	// does not; absent on a standby.
	DeviceUp *prometheus.GaugeVec
	// DeviceLastGood is when the device last answered this node.
	DeviceLastGood *prometheus.GaugeVec
	// DeviceStepDowns counts device-path releases.
	DeviceStepDowns *SessionValues
	// BuildInfo is 1, labelled with the running binary's build stamp.
	BuildInfo *prometheus.GaugeVec
	// TopologySuspect is 1 while a standby's local broker shows no status
	// from the session's owner.
	TopologySuspect *SessionValues
	// Bridges exports the bridge routes' forwarded and dropped messages.
	Bridges *dataplane.BridgeCounters
	// Node is 1, labelled with the node name, so that queries can name
	// the node behind a scrape target.
	Node *prometheus.GaugeVec
	// ValuesPolled counts the values poll routes read from their devices.
	ValuesPolled *prometheus.CounterVec
	// ValuesPublished counts the values poll routes published to their
	// local brokers.
	ValuesPublished *prometheus.CounterVec
}

// States a session reports in leasebridge_session_state.
var States = []string{"standby", "activating", "serving", "closing", "cooldown", "stopped"}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		FailureToFull: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasebridge_failure_to_full_seconds",
			Help:    "FailureToFullDuration by cause (owner_death, broker_path, device_path, handover, initial): from the start of the outage, as far as it can be known, to the successor's ServiceLevelFull (docs/failover-budget.md).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}, []string{"session", "cause"}),
		State:            newSessionStates(),
		Epoch:            sessionGauge("leasebridge_lease_epoch", "Lease epoch (fencing token) this process last owned the session at."),
		RenewFailures:    sessionCounter("leasebridge_renew_failures_total", "Renew calls that failed or timed out."),
		StepDowns:        sessionCounter("leasebridge_step_downs_total", "Broker-path step-downs: the broker path stayed not converged for broker_health_step_down."),
		Budget:           gaugeVec("leasebridge_failover_budget_seconds", "Admitted worst-case failover budget per failure mode (owner_death, broker_path, device_path).", "session", "mode"),
		TransportErrors:  counterVec("leasebridge_transport_errors_total", "Transport errors by operation (open, poll, write, publish, close).", "session", "transport", "op"),
		Takeovers:        sessionCounter("leasebridge_takeovers_total", "Times this process became the session's owner."),
		ClaimConflicts:   sessionGauge("leasebridge_endpoint_claim_conflicts", "1 while a device endpoint of the session is claimed under another key_prefix or session; the owner does not activate."),
		TimingMismatch:   sessionGauge("leasebridge_timing_mismatch", "1 while the lease row's owner runs a lease timing (lease_ttl, renew_interval, renew_call_timeout, acquire_poll_interval, fence_after) other than this node's; a standby then waits the longer lease_ttl."),
		TimingMismatches: sessionCounter("leasebridge_timing_mismatches_total", "Distinct row-owner lease timings seen that differ from this node's."),
		StoreUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasebridge_lease_store_up",
			Help: "1 while the lease store answers the linearizable probe this process sends several times per renew_interval, each within renew_call_timeout; 0 otherwise.",
		}),
		WriteRequests:   counterVec("leasebridge_write_requests_total", "Write requests by outcome: the reply code (ok, busy, stale, invalid, ...; docs/writes.md), or dropped.", "session", "route", "outcome"),
		DeviceUp:        gaugeVec("leasebridge_device_up", "1 while the owned session's device answers its polls, 0 while it does not; absent on a standby.", "session", "device"),
		DeviceLastGood:  gaugeVec("leasebridge_device_last_good_timestamp_seconds", "Unix time of the device's last good answer to this node.", "session", "device"),
		DeviceStepDowns: sessionCounter("leasebridge_device_step_downs_total", "Device-path releases: a device stayed unreachable for device_path_step_down."),
		BuildInfo:       gaugeVec("leasebridge_build_info", "1, labelled with the binary's module version, VCS revision, dirty flag and Go version (as `leasebridge version` prints).", buildinfo.LabelNames...),
		TopologySuspect: sessionGauge("leasebridge_broker_topology_suspect", "1 while this standby of a session with a bridge route has stood by longer than the owner-death budget and its local broker carries no active status from another node: the owner uses another broker (docs/bridged-data.md)."),
		Bridges:         dataplane.NewBridgeCounters(),
		Node:            gaugeVec("leasebridge_node_info", "1, labelled with the process's node name (the node key): join it on instance to name the node behind a scrape target.", "node"),
		ValuesPolled:    counterVec("leasebridge_values_polled_total", "Values a poll route read from its device: every tag of every successful poll.", "session", "route"),
		ValuesPublished: counterVec("leasebridge_values_published_total", "Values a poll route published and its local broker accepted: with publish: on_change only the changes, and after a failed poll every tag of the group as bad.", "session", "route"),
		SessionUnowned:  sessionGauge("leasebridge_session_unowned", "1 while no node owns the session as this node observes its lease row (released, or unchanged for its owner's lease_ttl); with fleet rows only."),
	}
	m.BuildInfo.WithLabelValues(buildinfo.Read().Labels()...).Set(1)
	reg.MustRegister(m.Bridges, m.FailureToFull, m.State, m.Epoch, m.RenewFailures, m.StepDowns, m.Budget, m.TransportErrors, m.Takeovers,
		m.ClaimConflicts, m.TimingMismatch, m.TimingMismatches, m.StoreUp, m.WriteRequests,
		m.DeviceUp, m.DeviceLastGood, m.DeviceStepDowns, m.BuildInfo, m.TopologySuspect, m.SessionUnowned,
		m.ValuesPolled, m.ValuesPublished, m.Node)
	return m
}

// declare makes a session's event counters exist at zero from the start:
// increase() and rate() over a series that first appears at 1 never see
// that first renew failure, step-down or takeover, and a dashboard would
// show no series rather than 0. The values counters are left to the
// term (Values), which creates them at zero before its first poll: on
// a standby they would only cost memory.
func (m *Metrics) declare(session string, rs []*routes.Route) {
	m.RenewFailures.WithLabelValues(session).Add(0)
	m.StepDowns.WithLabelValues(session).Add(0)
	m.DeviceStepDowns.WithLabelValues(session).Add(0)
	m.Takeovers.WithLabelValues(session).Add(0)
	m.Bridges.DeclareRoutes(session, rs)
}

// setState marks one state of a session as current.
func (m *Metrics) setState(session, state string) { m.State.Set(session, state) }

// SessionStates is leasebridge_session_state: one series per session and
// state, 1 for the session's current state and 0 for the others. It keeps
// one string per session and makes the series at each scrape: six
// labelled gauges per session were the largest part of the metrics' live
// heap in a process of 1,000 sessions (bench/sessions_test.go, profiled
// with LEASEBRIDGE_PROFILE_DIR).
type SessionStates struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	cur  map[string]string
}

func newSessionStates() *SessionStates {
	return &SessionStates{cur: map[string]string{}, desc: prometheus.NewDesc("leasebridge_session_state",
		"1 for the session's current state (standby, activating, serving, closing, cooldown, stopped), 0 otherwise.",
		[]string{"session", "state"}, nil)}
}

// Set marks state as the session's current one.
func (c *SessionStates) Set(session, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur[session] = state
}

// Describe sends the one family's description.
func (c *SessionStates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect sends every state of every session, from a copy taken under
// the lock so that a slow scrape never holds up a session's state change.
func (c *SessionStates) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	cur := maps.Clone(c.cur)
	c.mu.Unlock()
	for session, state := range cur {
		for _, s := range States {
			v := 0.0
			if s == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, session, s)
		}
	}
}

// Causes of FailureToFullDuration, the cause label.
const (
	// CauseOwnerDeath: the row still named an owner that stopped renewing.
	CauseOwnerDeath = "owner_death"
	// CauseBrokerPath: the owner released the row after its broker path
	// stayed lost for broker_health_step_down.
	CauseBrokerPath = "broker_path"
	// CauseDevicePath: the owner released the row after a device stayed
	// unreachable for device_path_step_down.
	CauseDevicePath = "device_path"
	// CauseHandover: a planned release (shutdown), or a released row that
	// says nothing.
	CauseHandover = lease.ReleaseCauseHandover
	// CauseInitial: the row never had an owner.
	CauseInitial = "initial"
)

// failureToFull is a term's FailureToFullDuration, measured at now, and its
// cause. The successor's part runs from its first observation of the row it
// took over (for owner death: the first read of the revision that went
// stale, at most one poll after the dead owner's last renew landed). A
// released row that carries the old owner's instant of failure extends the
// measure back to it, on the two nodes' wall clocks; a clock offset that
// would make it shorter than the successor's own part is ignored.
func failureToFull(ev lease.Event, now time.Time) (time.Duration, string) {
	d := lease.Now() - ev.Observed
	took := ev.Took
	switch {
	case took.Owner == "" && took.Epoch == 0:
		return d, CauseInitial
	case took.Owner != "":
		return d, CauseOwnerDeath
	}
	cause := CauseHandover
	if r := took.Release; r != nil {
		switch r.Cause {
		case CauseBrokerPath, CauseDevicePath:
			cause = r.Cause
		}
		if r.AtUnixNS > 0 {
			d = max(d, now.Sub(time.Unix(0, r.AtUnixNS)))
		}
	}
	return d, cause
}

// observeFailureToFull records one takeover's FailureToFullDuration.
func (m *Metrics) observeFailureToFull(session, cause string, d time.Duration) {
	m.FailureToFull.WithLabelValues(session, cause).Observe(d.Seconds())
}

// gaugeVec is a gauge family with its name, help and labels.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// counterVec is a counter family with its name, help and labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}
