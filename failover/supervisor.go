package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Sentinel errors.
var (
	// ErrStepDown is what Run returns after a broker-path step-down: every
	// lease was released and the process should exit for a restart as a
	// standby (cmd/leasebridge/exitcode.StepDown).
	ErrStepDown = errors.New("failover: stepped down after the broker path stayed lost")
	// ErrNotAdmitted reports a session whose admission report has refusals.
	ErrNotAdmitted = errors.New("failover: session not admitted")
	// ErrReleaseFailed is what Run returns after SIGTERM when a lease
	// release failed (the store did not confirm it): standbys take over
	// after lease_ttl, and the process exits with a failure status.
	ErrReleaseFailed = errors.New("failover: lease release failed")
)

// Options configure a Supervisor.
type Options struct {
	// Config is the loaded configuration.
	Config *routes.Config
	// Reports are the admission reports of every session, all admitted.
	Reports []admission.Report
	// Built, when set, is what preflight built from Config (its Admit gave
	// Reports): the first term of each session opens the device
	// transports built there instead of building them again.
	Built *preflight.Built
	// Store holds the lease rows.
	Store lease.Store
	// StoreEndpoints name the store in log lines (passwords redacted).
	StoreEndpoints []string
	// Identity is this process's lease identity.
	Identity lease.Identity
	// Node is the node name, for client ids.
	Node string
	// Logger receives structured logs.
	Logger *slog.Logger
	// Metrics receives the series; create with NewMetrics.
	Metrics *Metrics
	// Claims, when set, records the device endpoints of every owned
	// session (docs/lease-protocol.md, endpoint claims).
	Claims lease.Claimer
	// Fleet, when set, carries the node's membership row, planned
	// handovers and drains (docs/lease-protocol.md, fleet rows).
	Fleet lease.Fleet
}

// Supervisor runs every session of a process.
type Supervisor struct {
	o        Options
	sessions []*session
	stepDown chan stepDownRequest
	once     sync.Once
	health   *storeHealth
	topology *topology
	// managers counts the sessions whose lease manager runs (a session
	// sitting out a device-path cooldown counts: it is by design); stopping
	// is set once the process shuts down or steps down, and a session
	// ending its device-path cooldown then stays down.
	managers atomic.Int32
	stopping atomic.Bool
	fleet    *fleet // nil without Options.Fleet
	// pinned are the sessions of the file this node is not eligible for
	// (routes pin nodes): it runs no lease manager for them.
	pinned []string
}

type stepDownRequest struct {
	s     *session
	state transports.State
}

// routesBySession groups the configuration's routes by session, in file
// order.
func routesBySession(cfg *routes.Config) map[string][]*routes.Route {
	by := map[string][]*routes.Route{}
	for _, r := range cfg.Routes {
		by[r.Session] = append(by[r.Session], r)
	}
	return by
}

// sharedCalls returns what lets the process's managers share store
// calls, when the store can: one bulk read per poll for all standbys, and
// one batch of renewals per renew round for all owned rows. Nil for what
// the store cannot do: each manager then reads or renews its own row.
func sharedCalls(st lease.Store) (*lease.RowSource, *lease.Renewer) {
	var rows *lease.RowSource
	if pr, ok := st.(lease.PrefixReader); ok {
		rows, _ = lease.NewRowSource(lease.RowSourceOptions{Store: pr}) // pr is not nil
	}
	var ren *lease.Renewer
	if bs, ok := st.(lease.BatchSwapper); ok {
		ren, _ = lease.NewRenewer(lease.RenewerOptions{Store: bs}) // bs is not nil
	}
	return rows, ren
}

// New builds a manager per admitted session; nothing is opened until Run.
func New(o Options) (*Supervisor, error) {
	if o.Built != nil && o.Built.Config() != o.Config {
		return nil, errors.New("failover: Options.Built was built from another configuration")
	}
	sv := &Supervisor{o: o, stepDown: make(chan stepDownRequest, 1), health: newStoreHealth(o)}
	o.Metrics.Node.WithLabelValues(o.Node).Set(1)
	rows, ren := sharedCalls(o.Store)
	byName := routesBySession(o.Config)
	// Only the step-down thresholds are read from the sessions; they do not
	// depend on the transports' bounds, which o.Reports already summed.
	inputs := map[string]routes.Session{}
	for _, s := range o.Config.Sessions(nil) {
		inputs[s.Name] = s
	}
	for _, rep := range o.Reports {
		if !rep.Admitted() {
			return nil, fmt.Errorf("%w: session %s: %v", ErrNotAdmitted, rep.Session, rep.Refusals)
		}
		if pin := o.Config.Pinning(rep.Session); !pin.Eligible(o.Node) {
			sv.pinned = append(sv.pinned, rep.Session)
			o.Logger.Info("session pinned to other nodes: not competing", "session", rep.Session, "nodes", pin.Nodes)
			continue
		}
		s := &session{sup: sv, name: rep.Session, report: rep, routes: byName[rep.Session],
			log: o.Logger.With("session", rep.Session)}
		if bh := inputs[rep.Session].Inputs.BrokerHealth; bh.Mode == admission.BrokerHealthOn {
			s.threshold = bh.Threshold
		}
		if rep.DevicePath != nil {
			s.devThreshold = inputs[rep.Session].Inputs.DevicePath.Threshold
		}
		s.mgrOpts = lease.Options{
			Store:    o.Store,
			Key:      rep.Session,
			Identity: o.Identity,
			Config:   lease.ConfigFromReport(rep),
			Rows:     rows,
			Renewer:  ren,
			Wrote:    &s.wrote,
			OnEvent:  s.handle,
			OnRenewFailure: func(err error) {
				o.Metrics.RenewFailures.WithLabelValues(rep.Session).Inc()
				s.log.Warn("renew failed", "err", err)
			},
		}
		if _, err := s.newManager(); err != nil {
			return nil, fmt.Errorf("session %s: %w", rep.Session, err)
		}
		s.setState("standby")
		s.setConflict("")
		o.Metrics.TimingMismatch.WithLabelValues(rep.Session).Set(0)
		o.Metrics.TimingMismatches.WithLabelValues(rep.Session).Add(0)
		o.Metrics.declare(s.name, s.routes)
		o.Metrics.Budget.WithLabelValues(rep.Session, "owner_death").Set(rep.OwnerDeath.Total.Seconds())
		if rep.BrokerPath != nil {
			o.Metrics.Budget.WithLabelValues(rep.Session, "broker_path").Set(rep.BrokerPath.Total.Seconds())
		}
		if rep.DevicePath != nil {
			o.Metrics.Budget.WithLabelValues(rep.Session, "device_path").Set(rep.DevicePath.Total.Seconds())
		}
		sv.sessions = append(sv.sessions, s)
	}
	var err error
	if sv.topology, err = newTopology(sv); err != nil {
		return nil, err
	}
	if o.Fleet != nil {
		sv.fleet = newFleet(sv, o.Fleet)
	}
	return sv, nil
}

// LogBudgets writes the startup line of every session: its owner-death
// budget, broker_path_failover (the budget, off, or why it is undecided)
// and device_path_failover (the budget or off); then each warning
// admission gave it.
func LogBudgets(log *slog.Logger, reports []admission.Report) {
	for _, r := range reports {
		bp := "undecided: broker_health_step_down omitted"
		switch {
		case r.BrokerPath != nil:
			bp = admission.FormatSeconds(r.BrokerPath.Total)
		case r.BrokerPathFailover == "off":
			bp = "off"
		}
		dp := "off"
		if r.DevicePath != nil {
			dp = admission.FormatSeconds(r.DevicePath.Total)
		}
		slo := "none"
		if r.FailoverSLO != nil {
			slo = admission.FormatSeconds(*r.FailoverSLO)
		}
		log.Info("session admitted", "session", r.Session,
			"owner_death_budget", admission.FormatSeconds(r.OwnerDeath.Total),
			"broker_path_failover", bp, "device_path_failover", dp, "failover_slo", slo,
			"lease_ttl", admission.FormatSeconds(r.Timing.LeaseTTL),
			"activation", admission.FormatSeconds(r.Activation),
			"fence_after", admission.FormatSeconds(r.FenceAfter))
		for _, w := range r.Warnings {
			log.Warn("session admitted with a warning", "session", r.Session, "warning", w)
		}
	}
}

// Run drives every session until ctx ends, then ends every term in an
// orderly way and releases every lease (returning nil, or an error
// wrapping ErrReleaseFailed when a release failed), or until a broker-path
// step-down (returning ErrStepDown after releasing every lease).
func (sv *Supervisor) Run(ctx context.Context) error {
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	fctx, fcancel := context.WithCancel(mctx)
	defer fcancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sv.health.run(mctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); sv.topology.run(mctx) }()
	if sv.fleet != nil {
		wg.Add(1)
		go func() { defer wg.Done(); sv.fleet.run(fctx) }()
	}
	for _, s := range sv.sessions {
		// One goroutine per session while it stands by: the manager's;
		// lease events are handled on it (session.handle).
		wg.Add(1)
		sv.managers.Add(1)
		go func() {
			defer wg.Done()
			s.run(mctx)
			sv.managers.Add(-1)
		}()
	}
	var result error
	select {
	case <-ctx.Done():
		fcancel()
		sv.stopping.Store(true)
		sv.o.Logger.Info("shutting down: releasing every lease")
		result = sv.releaseAll(nil, time.Now())
	case req := <-sv.stepDown:
		fcancel()
		sv.stopping.Store(true)
		sv.runStepDown(req)
		result = ErrStepDown
	}
	mcancel()
	wg.Wait()
	if sv.fleet != nil {
		sv.fleet.farewell()
	}
	return result
}

// requestStepDown asks Run to step the process down; only the first
// request counts.
func (sv *Supervisor) requestStepDown(s *session, st transports.State) {
	sv.once.Do(func() {
		sv.stopping.Store(true)
		sv.stepDown <- stepDownRequest{s: s, state: st}
	})
}

// runStepDown is the broker-path step-down (docs/failover-budget.md): bounded source
// close, bounded lease release (each min(5s, step_down_grace)), settlement
// grace, then every other session releases too.
func (sv *Supervisor) runStepDown(req stepDownRequest) {
	s := req.s
	grace := s.report.Timing.StepDownGrace
	stage := min(admission.MaxStepDownStage, grace)
	log := s.log.With("step_down", true)

	ctx, cancel := context.WithTimeout(context.Background(), stage)
	if err := s.endTerm(ctx); err != nil {
		log.Error("source close exceeded its bound", "bound", stage.String(), "err", err)
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), stage)
	released := "every lease released"
	if err := s.manager().ReleaseWith(ctx, &lease.Release{Cause: CauseBrokerPath, AtUnixNS: req.state.Since.UnixNano()}); err != nil {
		// The standby then waits out lease_ttl: the owner-death path.
		log.Error("lease release failed; standbys take over after lease_ttl", "bound", stage.String(), "err", err)
		released = "lease releases failed"
	}
	cancel()
	log.Info("settlement grace", "step_down_grace", grace.String())
	time.Sleep(grace)
	// Each failure is logged; Run still returns ErrStepDown, since a
	// restart as standby is what the process needs either way.
	if sv.releaseAll(s, time.Now()) != nil {
		released = "lease releases failed"
	}
	sv.o.Logger.Error("stepped down: "+released+"; exiting for a restart as standby",
		"session", s.name, "broker_err", req.state.Err)
}

// releaseAll ends every term in an orderly way and releases every lease
// except skip's, concurrently, each within its own bound; the released rows
// say "handover" since at. It logs every release that failed and returns
// ErrReleaseFailed naming how many.
func (sv *Supervisor) releaseAll(skip *session, at time.Time) error {
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, s := range sv.sessions {
		if s == skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := s.report.Timing
			ctx, cancel := context.WithTimeout(context.Background(), s.report.CloseBound+time.Second)
			if err := s.endTerm(ctx); err != nil {
				s.log.Error("close exceeded its bound", "err", err)
			}
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 2*t.RenewCallTimeout)
			if err := s.manager().ReleaseWith(ctx, &lease.Release{Cause: CauseHandover, AtUnixNS: at.UnixNano()}); err != nil && !errors.Is(err, lease.ErrStopped) {
				failed.Add(1)
				s.log.Error("lease release failed; standbys take over after lease_ttl",
					"lease_ttl", admission.FormatSeconds(t.LeaseTTL), "err", scrub(err.Error(), sv.o.StoreEndpoints))
			}
			cancel()
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%w: %d of %d sessions", ErrReleaseFailed, n, len(sv.sessions))
	}
	return nil
}

// SessionStatus is one session's state for /sessions, /readyz and logs.
type SessionStatus struct {
	Session string `json:"session"`
	State   string `json:"state"`
	Owner   bool   `json:"owner"`
	// ServiceLevelFull is true while the session is owned and serving.
	ServiceLevelFull bool `json:"service_level_full"`
	// FailureToFullNS is the last takeover's FailureToFullDuration.
	FailureToFullNS int64 `json:"failure_to_full_ns,omitempty"`
	// FailureToFullCause is that takeover's cause (the cause label of
	// leasebridge_failure_to_full_seconds) and FailureToFullBudgetNS the
	// admitted budget of its failure mode.
	FailureToFullCause    string `json:"failure_to_full_cause,omitempty"`
	FailureToFullBudgetNS int64  `json:"failure_to_full_budget_ns,omitempty"`
	// OwnerDeathBudgetNS is the admitted owner-death budget.
	OwnerDeathBudgetNS int64 `json:"owner_death_budget_ns"`
	// EndpointConflict names the claim of another key_prefix or session
	// on a device endpoint that keeps the owned session from activating.
	EndpointConflict string `json:"endpoint_conflict,omitempty"`
	// TimingMismatch is set while the row's owner runs a lease timing
	// other than this node's.
	TimingMismatch *TimingMismatch `json:"timing_mismatch,omitempty"`
	// Devices are the session's devices as this owner last reached them;
	// absent on a standby, which does not know.
	Devices []DeviceStatus `json:"devices,omitempty"`
	// BrokerTopologySuspect, on a standby of a session with a bridge
	// route, says why its local broker seems not to see the owner (a
	// non-clustered broker per node; docs/bridged-data.md).
	BrokerTopologySuspect string `json:"broker_topology_suspect,omitempty"`
}

// Status reports every session, in name order.
func (sv *Supervisor) Status() []SessionStatus {
	out := make([]SessionStatus, 0, len(sv.sessions))
	for _, s := range sv.sessions {
		s.mu.Lock()
		last, lf, mismatch, h := s.lastFull, s.last, s.timing.current, s.health
		s.mu.Unlock()
		conflict, _ := s.conflict.Load().(string)
		st := SessionStatus{Session: s.name, State: s.State(), Owner: s.owned.Load(),
			ServiceLevelFull: s.full.Load(), FailureToFullNS: int64(last), OwnerDeathBudgetNS: int64(s.report.OwnerDeath.Total),
			EndpointConflict: conflict, TimingMismatch: mismatch, BrokerTopologySuspect: sv.topology.why(s.name),
			FailureToFullCause: lf.cause, FailureToFullBudgetNS: int64(lf.budget)}
		if h != nil {
			st.Devices = h.status()
		}
		out = append(out, st)
	}
	return out
}

// Ready reports whether this process can do its job: the lease store
// answers, every lease manager runs and the process is neither shutting
// down nor stepping down. Whether a device is up or a session is at
// ServiceLevelFull is not part of it: that is Status.
func (sv *Supervisor) Ready() bool { return len(sv.NotReady()) == 0 }

// NotReady lists why the process is not ready; empty when it is.
func (sv *Supervisor) NotReady() []string {
	var why []string
	if !sv.health.up.Load() {
		why = append(why, "lease store unreachable")
	}
	if n := int(sv.managers.Load()); n < len(sv.sessions) {
		why = append(why, fmt.Sprintf("%d of %d lease managers running", n, len(sv.sessions)))
	}
	if sv.stopping.Load() {
		why = append(why, "shutting down or stepping down")
	}
	return why
}

// Node is this process's node name.
func (sv *Supervisor) Node() string { return sv.o.Node }

// StoreUp reports whether the lease store answered the last probe.
func (sv *Supervisor) StoreUp() bool { return sv.health.up.Load() }

// ErrNoFleet is what FleetStatus returns when the lease store keeps no
// fleet rows (Options.Fleet is nil).
var ErrNoFleet = errors.New("failover: no fleet rows: the lease store does not support them")

// FleetStatus reads the fleet view of this process's configuration from
// the lease store, judged at now, within the node row's TTL.
func (sv *Supervisor) FleetStatus(ctx context.Context, now time.Time) (fleetview.Status, error) {
	if sv.fleet == nil {
		return fleetview.Status{}, ErrNoFleet
	}
	ctx, cancel := context.WithTimeout(ctx, sv.fleet.ttl)
	defer cancel()
	return fleetview.Read(ctx, sv.o.Config, sv.o.Reports, sv.fleet.store, now)
}
