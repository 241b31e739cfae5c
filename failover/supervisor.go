package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Sentinel errors.
var (
	// ErrStepDown is what Run returns after a broker-path step-down: every
	// lease was released and the process should exit with ExitStepDown.
	ErrStepDown = errors.New("failover: stepped down after the broker path stayed lost")
	// ErrNotAdmitted reports a session whose admission report has refusals.
	ErrNotAdmitted = errors.New("failover: session not admitted")
)

// Options configure a Supervisor.
type Options struct {
	// Config is the loaded configuration.
	Config *routes.Config
	// Reports are the admission reports of every session, all admitted.
	Reports []admission.Report
	// Store holds the lease rows.
	Store lease.Store
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

// New builds a manager per admitted session; nothing is opened until Run.
func New(o Options) (*Supervisor, error) {
	sv := &Supervisor{o: o, stepDown: make(chan stepDownRequest, 1)}
	byName := routesBySession(o.Config)
	inputs := map[string]routes.Session{}
	for _, s := range o.Config.Sessions() {
		inputs[s.Name] = s
	}
	for _, rep := range o.Reports {
		if !rep.Admitted() {
			return nil, fmt.Errorf("%w: session %s: %v", ErrNotAdmitted, rep.Session, rep.Refusals)
		}
		if !o.Config.Pinning(rep.Session).Eligible(o.Node) {
			sv.pinned = append(sv.pinned, rep.Session)
			o.Logger.Info("session pinned to other nodes: not competing", "session", rep.Session, "nodes", o.Config.Pinning(rep.Session).Nodes)
			continue
		}
		s := &session{sup: sv, name: rep.Session, report: rep, routes: byName[rep.Session],
			log: o.Logger.With("session", rep.Session)}
		if bh := inputs[rep.Session].Inputs.BrokerHealth; bh.Mode == admission.BrokerHealthOn {
			s.threshold = bh.Threshold
		}
		mgr, err := s.newManager()
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", rep.Session, err)
		}
		s.ctl.mgr = mgr
		s.setState("standby")
		s.setConflict("")
		o.Metrics.TimingMismatch.WithLabelValues(rep.Session).Set(0)
		o.Metrics.TimingMismatches.WithLabelValues(rep.Session).Add(0)
		o.Metrics.Budget.WithLabelValues(rep.Session, "owner_death").Set(rep.OwnerDeath.Total.Seconds())
		if rep.BrokerPath != nil {
			o.Metrics.Budget.WithLabelValues(rep.Session, "broker_path").Set(rep.BrokerPath.Total.Seconds())
		}
		sv.sessions = append(sv.sessions, s)
	}
	if o.Fleet != nil {
		sv.fleet = newFleet(sv, o.Fleet)
	}
	return sv, nil
}

// LogBudgets writes the startup line of every session: its owner-death
// budget and broker_path_failover (the budget, off, or why it is
// undecided).
func LogBudgets(log *slog.Logger, reports []admission.Report) {
	for _, r := range reports {
		bp := "undecided: broker_health_step_down omitted"
		switch {
		case r.BrokerPath != nil:
			bp = admission.FormatSeconds(r.BrokerPath.Total)
		case r.BrokerPathFailover == "off":
			bp = "off"
		}
		slo := "none"
		if r.FailoverSLO != nil {
			slo = admission.FormatSeconds(*r.FailoverSLO)
		}
		log.Info("session admitted", "session", r.Session,
			"owner_death_budget", admission.FormatSeconds(r.OwnerDeath.Total),
			"broker_path_failover", bp, "failover_slo", slo,
			"lease_ttl", admission.FormatSeconds(r.Timing.LeaseTTL),
			"activation", admission.FormatSeconds(r.Activation),
			"fence_after", admission.FormatSeconds(r.FenceAfter))
	}
}

// Run drives every session until ctx ends, then ends every term in an
// orderly way and releases every lease (returning nil), or until a
// broker-path step-down (returning ErrStepDown after releasing every
// lease).
func (sv *Supervisor) Run(ctx context.Context) error {
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	fctx, fcancel := context.WithCancel(mctx)
	defer fcancel()
	var wg sync.WaitGroup
	if sv.fleet != nil {
		wg.Add(1)
		go func() { defer wg.Done(); sv.fleet.run(fctx) }()
	}
	for _, s := range sv.sessions {
		// One goroutine per session while it stands by: the manager's;
		// lease events are handled on it (session.handle).
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runLease(mctx)
			s.stopped()
		}()
	}
	var result error
	select {
	case <-ctx.Done():
		fcancel()
		sv.o.Logger.Info("shutting down: releasing every lease")
		sv.releaseAll(nil)
	case req := <-sv.stepDown:
		fcancel()
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
	sv.once.Do(func() { sv.stepDown <- stepDownRequest{s: s, state: st} })
}

// runStepDown is the broker-path step-down of DESIGN.md: bounded source
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
	if err := s.closeManager().Release(ctx); err != nil {
		// The standby then waits out lease_ttl: the owner-death path.
		log.Error("lease release failed; standbys take over after lease_ttl", "bound", stage.String(), "err", err)
	}
	cancel()
	log.Info("settlement grace", "step_down_grace", grace.String())
	time.Sleep(grace)
	sv.releaseAll(s)
	sv.o.Logger.Error("stepped down: every lease released; exiting for a restart as standby",
		"exit_status", ExitStepDown, "session", s.name, "broker_err", req.state.Err)
}

// releaseAll ends every term in an orderly way and releases every lease
// except skip's, concurrently, each within its own bound.
func (sv *Supervisor) releaseAll(skip *session) {
	var wg sync.WaitGroup
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
			if err := s.closeManager().Release(ctx); err != nil && !errors.Is(err, lease.ErrStopped) {
				s.log.Error("release", "err", err)
			}
			cancel()
		}()
	}
	wg.Wait()
}

// SessionStatus is one session's state for /readyz and logs.
type SessionStatus struct {
	Session string `json:"session"`
	State   string `json:"state"`
	Owner   bool   `json:"owner"`
	// ServiceLevelFull is true while the session is owned and serving.
	ServiceLevelFull bool `json:"service_level_full"`
	// FailureToFullNS is the last takeover's FailureToFullDuration.
	FailureToFullNS int64 `json:"failure_to_full_ns,omitempty"`
	// OwnerDeathBudgetNS is the admitted owner-death budget.
	OwnerDeathBudgetNS int64 `json:"owner_death_budget_ns"`
	// EndpointConflict names the claim of another key_prefix or session
	// on a device endpoint that keeps the owned session from activating.
	EndpointConflict string `json:"endpoint_conflict,omitempty"`
	// TimingMismatch is set while the row's owner runs a lease timing
	// other than this node's.
	TimingMismatch *TimingMismatch `json:"timing_mismatch,omitempty"`
}

// Status reports every session, in name order.
func (sv *Supervisor) Status() []SessionStatus {
	out := make([]SessionStatus, 0, len(sv.sessions))
	for _, s := range sv.sessions {
		s.mu.Lock()
		last, mismatch := s.lastFull, s.timing.current
		s.mu.Unlock()
		conflict, _ := s.conflict.Load().(string)
		out = append(out, SessionStatus{Session: s.name, State: s.State(), Owner: s.owned.Load(),
			ServiceLevelFull: s.full.Load(), FailureToFullNS: int64(last), OwnerDeathBudgetNS: int64(s.report.OwnerDeath.Total),
			EndpointConflict: conflict, TimingMismatch: mismatch})
	}
	return out
}

// Ready reports whether every owned session is at ServiceLevelFull.
func (sv *Supervisor) Ready() bool {
	for _, s := range sv.sessions {
		if s.owned.Load() && !s.full.Load() {
			return false
		}
	}
	return true
}
