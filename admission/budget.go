package admission

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// BrokerHealthMode is the tri-state of broker_health_step_down.
type BrokerHealthMode string

// The three states of broker_health_step_down.
const (
	BrokerHealthOmitted BrokerHealthMode = ""    // the decision was not made
	BrokerHealthOff     BrokerHealthMode = "off" // broker-path failover disabled on purpose
	BrokerHealthOn      BrokerHealthMode = "on"  // step down after the threshold
)

// BrokerHealth is broker_health_step_down: omitted, off, or a threshold.
type BrokerHealth struct {
	Mode      BrokerHealthMode
	Threshold time.Duration // meaningful only when Mode is BrokerHealthOn
}

// String prints the value as it is written in a configuration.
func (b BrokerHealth) String() string {
	switch b.Mode {
	case BrokerHealthOn:
		return FormatSeconds(b.Threshold)
	case BrokerHealthOff:
		return "off"
	}
	return "omitted"
}

// DevicePath is device_path_step_down and device_path_cooldown. A zero
// Threshold is off, the default: a device that is down for every node
// keeps its owner, which publishes the outage.
type DevicePath struct {
	// Threshold is how long a session's device may stay unreachable while
	// the lease store is fine before the owner releases that session.
	Threshold time.Duration
	// Cooldown is how long a node that released a session for its device
	// path does not compete for it; nil derives it (DefaultCooldown).
	Cooldown *time.Duration
}

// String prints the threshold as it is written in a configuration.
func (d DevicePath) String() string {
	if d.Threshold <= 0 {
		return "off"
	}
	return FormatSeconds(d.Threshold)
}

// State is "on" when a threshold is set and "off" otherwise, the
// report's device_path_failover.
func (d DevicePath) State() string {
	if d.Threshold > 0 {
		return "on"
	}
	return "off"
}

// Activation is one transport's disclosed activation and close bounds.
type Activation struct {
	Name  string        `json:"name"`
	Bound time.Duration `json:"activation_ns"`
	Close time.Duration `json:"close_ns"`
	// Entry is the configuration entry the transport was built from
	// ("brokers.local", "devices.plc"), or the name of a lease-store call
	// the activation pays; empty means Name.
	Entry string `json:"entry,omitempty"`
	// Parts are the keys Bound is made of, when the transport discloses
	// them (their Count x Each add up to Bound); nil shows Bound as one
	// opaque part.
	Parts []Part `json:"parts,omitempty"`
}

// Inputs are one session's canonical manager inputs.
type Inputs struct {
	Session          string
	Timing           Timing
	BrokerHealth     BrokerHealth
	DevicePath       DevicePath
	StartupAllowance time.Duration
	// FailoverSLO is the declared objective; nil when none is declared.
	FailoverSLO *time.Duration
	// Transports lists what the session opens as owner; their activation
	// bounds add up to the activation term and their close bounds to the
	// close bound of the self-fence rule.
	Transports []Activation
	// Spread is the file's spread: a standby that is not a stale row's
	// desired taker defers its takeover by TakeoverDeferral, which the
	// owner-death budget then includes.
	Spread bool
	// Store is the raft timing of the lease store when the fleet runs it
	// itself (lease_store.members); nil otherwise. With it the owner-death
	// budget has a store_recovery term, and a store election that can
	// outlast what the owner's fence deadline tolerates is warned about.
	Store *Store
}

// Budget is one failure mode's worst case, term by term.
type Budget struct {
	Total time.Duration `json:"total_ns"`
	Terms []Term        `json:"terms"`
}

// term is the value of b's term name, 0 when b has none.
func (b Budget) term(name string) time.Duration {
	for _, t := range b.Terms {
		if t.Name == name {
			return t.Value
		}
	}
	return 0
}

// Term is one named addend of a budget.
type Term struct {
	Name  string        `json:"name"`
	Value time.Duration `json:"ns"`
	// Parts are the keys the term is made of (explain.go); nil for a
	// term without a breakdown, which then shows as itself.
	Parts []Part `json:"parts,omitempty"`
	// Note says how a count was reached, when it is computed.
	Note string `json:"note,omitempty"`
}

// Report is the outcome of admitting one session.
type Report struct {
	// Session and Timing are those of the evaluated Inputs.
	Session string
	Timing  Timing
	// OwnerDeath is the owner-death budget (with the takeover deferral
	// under spread).
	OwnerDeath Budget
	// BrokerPath is nil when broker_health_step_down is off or omitted.
	BrokerPath *Budget
	// BrokerPathFailover is "on", "off" or "undecided".
	BrokerPathFailover string
	// DevicePath is nil when device_path_step_down is off.
	DevicePath *Budget
	// DevicePathFailover is "on" or "off".
	DevicePathFailover string
	// DevicePathCooldown is the resolved device_path_cooldown; 0 when off.
	DevicePathCooldown time.Duration
	// TakeoverDeferral is how much longer than lease_ttl a standby that
	// is not a row's desired taker waits before taking it over; 0 without
	// spread.
	TakeoverDeferral time.Duration
	// FailoverSLO is the declared objective; nil when none is declared.
	FailoverSLO *time.Duration
	// Activation and CloseBound are the sums of the transports' activation
	// and close bounds (Inputs.Transports).
	Activation time.Duration
	CloseBound time.Duration
	// FenceAfter is how long after sending its last successful renew the
	// owner must have closed its transports: lease_ttl - close bound -
	// clock-rate margin. The lease manager cancels the owner context then.
	FenceAfter time.Duration
	// StoreElection is E, the bound on the store's leader election
	// (StoreElection); 0 unless the fleet runs its lease store itself.
	StoreElection time.Duration
	// Refusals say why the session is not admitted; empty when it is.
	Refusals []string
	// Warnings name risks that do not refuse the session, each with its
	// numbers and the change that avoids it.
	Warnings []string
}

// Admitted reports whether the session has no refusal.
func (r *Report) Admitted() bool { return len(r.Refusals) == 0 }

// MaxStepDownStage caps each of the bounded source close and the bounded
// lease release of a broker-path step-down.
const MaxStepDownStage = 5 * time.Second

// ClockRatePPM bounds how far the owner's and a standby's clocks may run
// apart, in parts per million of an interval. The self-fence deadline keeps
// this fraction of lease_ttl as margin.
const ClockRatePPM = 1000

// ClockRateMargin is ceil(lease_ttl * ClockRatePPM / 1e6).
func ClockRateMargin(leaseTTL time.Duration) time.Duration {
	// Divide first so lease_ttl near MaxInt64 cannot overflow.
	const per = 1_000_000 / ClockRatePPM
	return time.Duration(ceilDiv(int64(leaseTTL), per))
}

// OwnerDeath is the owner-death budget:
// L + 2*pb + (1 + ceil(L/mjp))*C + A + S.
func OwnerDeath(t Timing, activation, startup time.Duration) (Budget, error) {
	return ownerDeath(t, activation, startup, false, nil)
}

// OwnerDeathSpread is the owner-death budget with spread on: a standby
// that is not the desired taker of the dead owner's row takes it only
// after the takeover deferral, so when the desired taker is dead or stuck
// too the others take over that much later:
// L + 2*pb + (1 + ceil(L/mjp))*C + A + S + (2*pb + 3*C).
func OwnerDeathSpread(t Timing, activation, startup time.Duration) (Budget, error) {
	return ownerDeath(t, activation, startup, true, nil)
}

// OwnerDeathOnStore is the owner-death budget of a fleet that runs its
// lease store s itself: the node that dies may take the store's leader
// with it, so the budget has the store_recovery term (StoreRecovery),
// after observation_calls, and the takeover deferral under spread.
func OwnerDeathOnStore(t Timing, activation, startup time.Duration, spread bool, s Store) (Budget, error) {
	return ownerDeath(t, activation, startup, spread, &s)
}

// TakeoverDeferral is 2*pb + 3*C: long enough that the desired taker,
// which saw the row's last revision at most pb + C before another standby
// did and wins it within one more pb + C of lease_ttl, has written its
// row before that standby's read, sent up to C before its response, can
// find the old revision.
func TakeoverDeferral(t Timing) (time.Duration, error) {
	var c calc
	pb, err := PollBoundary(t.AcquirePollInterval)
	if err != nil {
		return 0, fmt.Errorf("%w (takeover_deferral)", err)
	}
	d := c.add("takeover_deferral", c.mul("takeover_deferral", pb, 2), c.mul("takeover_deferral", t.RenewCallTimeout, 3))
	return d, c.err
}

// ownerDeath is the owner-death budget; store is nil unless the fleet
// runs its lease store itself, and only then has the budget a
// store_recovery term.
func ownerDeath(t Timing, activation, startup time.Duration, spread bool, store *Store) (Budget, error) {
	var c calc
	pb, err := PollBoundary(t.AcquirePollInterval)
	if err != nil {
		return Budget{}, fmt.Errorf("%w (poll_boundaries)", err)
	}
	mjp := MinJitteredPoll(t.AcquirePollInterval)
	rounds := observationRounds(t)
	obs := keyed("observation_calls", observationCalls(&c, t), lease("renew_call_timeout", rounds, t.RenewCallTimeout))
	obs.Note = fmt.Sprintf("%d = 1 + ceil(lease_ttl %s / %s, the shortest jittered poll)", rounds, FormatSeconds(t.LeaseTTL), FormatSeconds(mjp))
	terms := []Term{
		keyed("lease_ttl", t.LeaseTTL, lease("lease_ttl", 1, t.LeaseTTL)),
		keyed("poll_boundaries", c.mul("poll_boundaries", pb, 2), pollParts(t, pb, 2)),
		obs,
	}
	if store != nil {
		d, err := StoreRecovery(t, *store)
		if err != nil {
			return Budget{}, err
		}
		terms = append(terms, Term{Name: "store_recovery", Value: d})
	}
	terms = append(terms, Term{Name: "activation", Value: activation}, keyed("startup_allowance", startup, lease("startup_allowance", 1, startup)))
	if spread {
		d, err := TakeoverDeferral(t)
		if err != nil {
			return Budget{}, err
		}
		terms = append(terms, keyed("takeover_deferral", d, pollParts(t, pb, 2), lease("renew_call_timeout", 3, t.RenewCallTimeout)))
	}
	return total(&c, terms)
}

// BrokerPath is the broker-path budget for threshold B:
// B + R + J/2 + 2*min(5s, G) + G + 2*pb + 4*C + A + S.
func BrokerPath(t Timing, threshold, activation, startup time.Duration) (Budget, error) {
	return release(t, keyed("broker_health_step_down", threshold, lease("broker_health_step_down", 1, threshold)), true, activation, startup)
}

// DevicePathBudget is the device-path budget for threshold D:
// D + R + J/2 + 2*min(5s, G) + 2*pb + 4*C + A + S. It is the broker-path
// budget without the settlement grace: the owner releases one session and
// keeps running, so nothing waits for the process to exit.
func DevicePathBudget(t Timing, threshold, activation, startup time.Duration) (Budget, error) {
	return release(t, keyed("device_path_step_down", threshold, lease("device_path_step_down", 1, threshold)), false, activation, startup)
}

// release is the budget of an owner that releases its row after a path
// stayed lost for threshold: detection round, bounded close and release,
// the settlement grace when the process exits after it, two standby polls,
// four store calls, activation and startup allowance.
func release(t Timing, threshold Term, settle bool, activation, startup time.Duration) (Budget, error) {
	var c calc
	pb, err := PollBoundary(t.AcquirePollInterval)
	if err != nil {
		return Budget{}, fmt.Errorf("%w (standby_polls)", err)
	}
	stage := min(MaxStepDownStage, t.StepDownGrace)
	terms := []Term{
		threshold,
		keyed("detection_round", c.add("detection_round", t.RenewInterval, t.RenewJitter/2),
			lease("renew_interval", 1, t.RenewInterval),
			derived("lease_renew_jitter", 1, t.RenewJitter/2, "lease_renew_jitter %s / 2", t.RenewJitter)),
		keyed("bounded_close_and_release", c.mul("bounded_close_and_release", stage, 2),
			derived("step_down_grace", 2, stage, "min(%s, step_down_grace %s)", MaxStepDownStage, t.StepDownGrace)),
	}
	if settle {
		terms = append(terms, keyed("settlement_grace", t.StepDownGrace, lease("step_down_grace", 1, t.StepDownGrace)))
	}
	terms = append(terms,
		keyed("standby_polls", c.mul("standby_polls", pb, 2), pollParts(t, pb, 2)),
		keyed("store_calls", c.mul("store_calls", t.RenewCallTimeout, 4), lease("renew_call_timeout", 4, t.RenewCallTimeout)),
		Term{Name: "activation", Value: activation},
		keyed("startup_allowance", startup, lease("startup_allowance", 1, startup)),
	)
	return total(&c, terms)
}

// StandbyPickup is 2*pb + 2*C: how long after a release lands a standby
// that polls may still need to win the row (an Acquire already in flight
// loses its compare-and-swap and waits a full poll). A node that released
// a session must sit out at least this long, or it could take the row
// back from a standby still asleep.
func StandbyPickup(t Timing) (time.Duration, error) {
	var c calc
	pb, err := PollBoundary(t.AcquirePollInterval)
	if err != nil {
		return 0, err
	}
	d := c.add("standby_pickup", c.mul("standby_pickup", pb, 2), c.mul("standby_pickup", t.RenewCallTimeout, 2))
	return d, c.err
}

func total(c *calc, terms []Term) (Budget, error) {
	b := Budget{Terms: terms}
	for _, t := range terms {
		b.Total = c.add(t.Name, b.Total, t.Value)
	}
	if c.err != nil {
		return Budget{}, c.err
	}
	return b, nil
}

// MQTTActivationBound is the paho transport's aggregate activation bound:
// an initial connect and reconcile, then up to two recycles each after an
// unmatched-grace wait: 3*connect + 3*reconcile + 2*unmatched_grace.
func MQTTActivationBound(connect, reconcile, unmatchedGrace time.Duration) (time.Duration, error) {
	var c calc
	d := c.sum("mqtt_activation",
		c.mul("mqtt_activation", connect, 3),
		c.mul("mqtt_activation", reconcile, 3),
		c.mul("mqtt_activation", unmatchedGrace, 2))
	return d, c.err
}

// MQTTActivationParts are the keys MQTTActivationBound adds up.
func MQTTActivationParts(connect, reconcile, unmatchedGrace time.Duration) []Part {
	return []Part{
		{Key: "connect_timeout", Count: 3, Each: connect},
		{Key: "reconcile_timeout", Count: 3, Each: reconcile},
		{Key: "unmatched_grace", Count: 2, Each: unmatchedGrace},
	}
}

// Evaluate computes both budgets of one session and every refusal. It never
// opens anything; errors in the arithmetic become refusals.
func Evaluate(in Inputs) Report {
	r := Report{
		Session:     in.Session,
		Timing:      in.Timing,
		FailoverSLO: in.FailoverSLO,
	}
	refuse := func(format string, args ...any) {
		r.Refusals = append(r.Refusals, fmt.Sprintf(format, args...))
	}
	var c calc
	for _, tr := range in.Transports {
		r.Activation = c.add("activation", r.Activation, tr.Bound)
		r.CloseBound = c.add("close_bound", r.CloseBound, tr.Close)
	}
	if c.err != nil {
		refuse("%v", c.err)
		return r
	}
	checkRanges(in, refuse)
	r.DevicePathFailover = in.DevicePath.State()
	if len(r.Refusals) > 0 {
		r.BrokerPathFailover = brokerPathState(in.BrokerHealth)
		return r
	}
	checkSelfFence(&r, refuse)
	odErr := evaluateOwnerDeath(&r, in, refuse)
	checkElectionFence(&r, in, refuse)
	r.BrokerPathFailover = brokerPathState(in.BrokerHealth)
	if in.BrokerHealth.Mode == BrokerHealthOn {
		bp, err := BrokerPath(r.Timing, in.BrokerHealth.Threshold, r.Activation, in.StartupAllowance)
		if err != nil {
			refuse("broker-path budget: %v", err)
		} else {
			r.BrokerPath = &bp
		}
	}
	evaluateDevicePath(&r, in, refuse)
	explainActivation(&r.OwnerDeath, in.Transports)
	explainActivation(r.BrokerPath, in.Transports)
	explainActivation(r.DevicePath, in.Transports)
	if in.FailoverSLO != nil {
		checkSLO(&r, in, odErr == nil, refuse)
	}
	return r
}

// checkRanges refuses values outside the range they must be in before
// any relation between them makes sense.
func checkRanges(in Inputs, refuse func(string, ...any)) {
	t, fs := in.Timing, FormatSeconds
	for _, p := range []struct {
		key string
		d   time.Duration
	}{
		{"lease_ttl", t.LeaseTTL}, {"renew_interval", t.RenewInterval},
		{"renew_call_timeout", t.RenewCallTimeout}, {"acquire_poll_interval", t.AcquirePollInterval},
	} {
		if p.d <= 0 {
			refuse("%s = %s: must be > 0", p.key, fs(p.d))
		}
	}
	for _, p := range []struct {
		key string
		d   time.Duration
	}{{"lease_renew_jitter", t.RenewJitter}, {"step_down_grace", t.StepDownGrace}, {"startup_allowance", in.StartupAllowance}} {
		if p.d < 0 {
			refuse("%s = %s: must be >= 0", p.key, fs(p.d))
		}
	}
	if t.MaxRenewFails < 1 {
		refuse("max_renew_fails = %d: must be >= 1", t.MaxRenewFails)
	}
	if in.BrokerHealth.Mode == BrokerHealthOn && in.BrokerHealth.Threshold <= 0 {
		refuse("broker_health_step_down = %s: must be a positive duration or off", fs(in.BrokerHealth.Threshold))
	}
	if in.DevicePath.Threshold < 0 {
		refuse("device_path_step_down = %s: must be a positive duration or off", fs(in.DevicePath.Threshold))
	}
	if in.DevicePath.Cooldown != nil && *in.DevicePath.Cooldown < 0 {
		refuse("device_path_cooldown = %s: must be >= 0", fs(*in.DevicePath.Cooldown))
	}
	if in.FailoverSLO != nil && *in.FailoverSLO <= 0 {
		refuse("failover_slo = %s: must be > 0", fs(*in.FailoverSLO))
	}
	checkStore(in.Store, refuse)
}

// checkSelfFence sets r.FenceAfter and refuses a timing whose renew round
// at its longest (the previous call, the interval with jitter, the new
// call) plus closing the transports and the clock-rate margin does not fit
// into lease_ttl: the owner would fence itself in normal operation before
// its next renew could land. It also refuses a jitter that could schedule
// a renew at once.
func checkSelfFence(r *Report, refuse func(string, ...any)) {
	t, fs := r.Timing, FormatSeconds
	if t.RenewJitter/2 >= t.RenewInterval {
		refuse("renew jitter: lease_renew_jitter/2 = %s must be < renew_interval = %s, or a renew could be scheduled at once",
			fs(t.RenewJitter/2), fs(t.RenewInterval))
	}
	margin := ClockRateMargin(t.LeaseTTL)
	r.FenceAfter = t.LeaseTTL - r.CloseBound - margin
	var c calc
	need := c.sum("self_fence", t.RenewCallTimeout, t.RenewInterval, t.RenewJitter/2, t.RenewCallTimeout, r.CloseBound, margin)
	if c.err != nil {
		refuse("%v", c.err)
	} else if need > t.LeaseTTL {
		refuse("self-fence: renew_call_timeout + renew_interval + lease_renew_jitter/2 + renew_call_timeout + close_bound + clock_rate_margin = %s + %s + %s + %s + %s + %s = %s must be <= lease_ttl = %s: the owner would reach its fence deadline before its next renew can land",
			fs(t.RenewCallTimeout), fs(t.RenewInterval), fs(t.RenewJitter/2), fs(t.RenewCallTimeout), fs(r.CloseBound), fs(margin), fs(need), fs(t.LeaseTTL))
	}
}

// evaluateOwnerDeath sets r.OwnerDeath and its takeover deferral (0
// without spread), or refuses; it returns the budget's error.
func evaluateOwnerDeath(r *Report, in Inputs, refuse func(string, ...any)) error {
	od, err := ownerDeath(r.Timing, r.Activation, in.StartupAllowance, in.Spread, in.Store)
	if err != nil {
		refuse("owner-death budget: %v", err)
		return err
	}
	r.OwnerDeath = od
	r.TakeoverDeferral = od.term("takeover_deferral") // 0 without spread
	return nil
}

// checkSLO refuses budgets over the declared failover_slo, and an SLO
// declared while broker_health_step_down is omitted. ownerDeath says the
// owner-death budget was computed.
func checkSLO(r *Report, in Inputs, ownerDeath bool, refuse func(string, ...any)) {
	slo, fs := *in.FailoverSLO, FormatSeconds
	if in.BrokerHealth.Mode == BrokerHealthOmitted {
		refuse("failover_slo = %s is declared but broker_health_step_down is omitted: set it to off (the objective covers owner death alone) or to a duration", fs(slo))
	}
	if ownerDeath && r.OwnerDeath.Total > slo {
		refuse("owner-death budget %s exceeds failover_slo %s by %s (%s)", fs(r.OwnerDeath.Total), fs(slo), fs(r.OwnerDeath.Total-slo), dominant(r.OwnerDeath))
	}
	if r.BrokerPath != nil && r.BrokerPath.Total > slo {
		refuse("broker-path budget %s exceeds failover_slo %s by %s (%s)", fs(r.BrokerPath.Total), fs(slo), fs(r.BrokerPath.Total-slo), dominant(*r.BrokerPath))
	}
	if r.DevicePath != nil && r.DevicePath.Total > slo {
		refuse("device-path budget %s exceeds failover_slo %s by %s (%s)", fs(r.DevicePath.Total), fs(slo), fs(r.DevicePath.Total-slo), dominant(*r.DevicePath))
	}
}

// evaluateDevicePath computes the device-path budget and cooldown when
// device_path_step_down is on, refusing a cooldown shorter than a
// standby's pickup.
func evaluateDevicePath(r *Report, in Inputs, refuse func(string, ...any)) {
	d := in.DevicePath
	if d.Threshold <= 0 {
		return
	}
	fs := FormatSeconds
	dp, err := DevicePathBudget(in.Timing, d.Threshold, r.Activation, in.StartupAllowance)
	if err != nil {
		refuse("device-path budget: %v", err)
		return
	}
	r.DevicePath = &dp
	pickup, err := StandbyPickup(in.Timing)
	if err != nil {
		refuse("device_path_cooldown: %v", err)
		return
	}
	// Unpinned, the cooldown is max(threshold, pickup): every term of a node
	// that cannot reach the device lasts at least the threshold, so while
	// the device stays down the node owns the session at most half the
	// time, and it never outruns a standby.
	r.DevicePathCooldown = max(d.Threshold, pickup)
	if d.Cooldown != nil {
		r.DevicePathCooldown = *d.Cooldown
		if *d.Cooldown < pickup {
			refuse("device_path_cooldown = %s must be >= 2*pb + 2*renew_call_timeout = %s: a node that released the session could take it back before a standby asleep for a poll wins it",
				fs(*d.Cooldown), fs(pickup))
		}
	}
}

func brokerPathState(b BrokerHealth) string {
	switch b.Mode {
	case BrokerHealthOn:
		return "on"
	case BrokerHealthOff:
		return "off"
	}
	return "undecided"
}

// SharePercent is part's share of total in percent, rounded half away
// from zero to one decimal: the one rounding every report prints, so a
// refusal's figure and its table agree.
func SharePercent(part, total time.Duration) float64 {
	if total <= 0 {
		return 0
	}
	return math.Round(float64(part)*1000/float64(total)) / 10
}

// dominant names the largest terms of a budget so a refusal says which knob
// to turn.
func dominant(b Budget) string {
	terms := append([]Term(nil), b.Terms...)
	sort.SliceStable(terms, func(i, j int) bool { return terms[i].Value > terms[j].Value })
	var parts []string
	for _, t := range terms[:min(3, len(terms))] {
		if t.Value == 0 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s = %.1f%%", t.Name, FormatSeconds(t.Value), SharePercent(t.Value, b.Total)))
	}
	return "largest terms: " + strings.Join(parts, ", ")
}
