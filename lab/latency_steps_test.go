package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// latencyStep is one step of a staircase, or one jump, and what it
// measured between From (the round trip added) and To.
type latencyStep struct {
	Scope  string
	Factor float64 // the added round trip, in renew_call_timeout
	// Jump is set when the round trip went from none to Delay at once; a
	// staircase's step comes from the step below it. DownFrom, when set,
	// is the factor the round trip came down from after the slow node
	// fenced its sessions.
	Jump     bool
	DownFrom float64
	Delay    time.Duration
	// Slow names the nodes whose store path carries Delay; Owned is how
	// many sessions they owned when the step began.
	Slow     []string
	Owned    int
	From, To time.Time
	// RenewFailures and Takeovers are the increase of
	// leasebridge_renew_failures_total and leasebridge_takeovers_total,
	// summed over both processes and every session.
	RenewFailures, Takeovers int
	// Fences and Lost count "ownership ended" log lines (event fenced:
	// the self-fence deadline passed; lost: another owner was read).
	Fences, Lost int
	// StoreDown of StoreSamples samples of the slow nodes'
	// leasebridge_lease_store_up read 0.
	StoreDown, StoreSamples int
	// Base are the durations of writes to etcd sent straight to it during
	// the step (-1: failed).
	Base []time.Duration
	// Idle is the longest time any session's device got no request.
	Idle time.Duration
	// Served is how many sessions were served when the step ended.
	Served int
	// TwoClients counts pairs of device connections whose requests
	// interleaved in a device's log during the step.
	TwoClients int
	// Recovery, on a staircase's last step and on a jump, is from lifting
	// the round trip to every session served again.
	Recovery time.Duration
	// Outage, where Recovery is set, is the longest time a device got no
	// request from the staircase's (or jump's) start to that recovery.
	Outage time.Duration
	Errs   []string
}

func (st *latencyStep) fail(format string, args ...any) {
	st.Errs = append(st.Errs, fmt.Sprintf(format, args...))
}

// label names the step in logs and errors.
func (st *latencyStep) label() string {
	switch {
	case st.Jump:
		return fmt.Sprintf("jump %gx on %s", st.Factor, st.Scope)
	case st.DownFrom > 0:
		return fmt.Sprintf("down to %gx from %gx after a fence, on %s", st.Factor, st.DownFrom, st.Scope)
	}
	return fmt.Sprintf("step %gx on %s", st.Factor, st.Scope)
}

// line is the step's log line; fences are counted from the logs after the
// last step.
func (st *latencyStep) line() string {
	return fmt.Sprintf("%s (%s on %s, owning %d): etcd write %s, renew failures %d, takeovers %d, store down %d/%d, longest device idle %s, served %d, two clients %d, recovery %s, took %s",
		st.label(), fs(st.Delay), strings.Join(st.Slow, ","), st.Owned, st.base(), st.RenewFailures, st.Takeovers,
		st.StoreDown, st.StoreSamples, fs(st.Idle), st.Served, st.TwoClients, fs(st.Recovery), fs(st.To.Sub(st.From)))
}

// base is the step's straight etcd writes: median / max, and failures.
func (st *latencyStep) base() string {
	var ok []time.Duration
	for _, d := range st.Base {
		if d >= 0 {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.0f / %.0f ms", ms(median(ok)), ms(maxDur(ok)))
	if n := len(st.Base) - len(ok); n > 0 {
		s += fmt.Sprintf(", %d failed", n)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dwell is how long a step holds its round trip before it is judged: one
// lease_ttl plus FenceAfter, so an owner whose every renew fails fences
// within the step and the standby has seen the row go quiet.
func (f *latencyFleet) dwell() time.Duration { return f.report.Timing.LeaseTTL + f.report.FenceAfter }

// recoveryBudget is what admission allows from a store fault whose
// requests may still land to a successor serving: the owner keeps
// renewing until it fences, at most FenceAfter, then owner death.
func (f *latencyFleet) recoveryBudget() time.Duration {
	return f.report.FenceAfter + f.report.OwnerDeath.Total
}

// staircase settles the fleet, then raises the round trip on scope's
// paths through factors without lifting it in between, and lifts it after
// the last.
func (f *latencyFleet) staircase(scope string, factors []float64) {
	if err := f.settle(); err != nil {
		f.t.Errorf("%s staircase: %v", scope, err)
		return
	}
	slow := f.slowNodes(scope)
	var st *latencyStep
	began := time.Now()
	for _, x := range factors {
		st = &latencyStep{Scope: scope, Factor: x}
		f.step(st, slow)
	}
	f.heal(st, slow, began)
}

// jump settles the fleet and adds x renew_call_timeout at once.
func (f *latencyFleet) jump(scope string, x float64) {
	if err := f.settle(); err != nil {
		f.t.Errorf("%s jump: %v", scope, err)
		return
	}
	slow := f.slowNodes(scope)
	st := &latencyStep{Scope: scope, Factor: x, Jump: true}
	began := time.Now()
	f.step(st, slow)
	f.heal(st, slow, began)
}

// downAfterFence settles the fleet, adds from x renew_call_timeout on one
// node's path until that node has fenced every session it owned, then
// lowers it to x, where its renewals would land again: every session must
// be served within the recovery budget of the change, by whichever node.
func (f *latencyFleet) downAfterFence(from, x float64) {
	if err := f.settle(); err != nil {
		f.t.Errorf("down after a fence: %v", err)
		return
	}
	slow := f.slowNodes(scopeOne)
	began := time.Now()
	if err := slow[0].store.slow(time.Duration(from * float64(f.report.Timing.RenewCallTimeout))); err != nil {
		f.t.Errorf("%s store path: %v", slow[0].name, err)
		return
	}
	ctx, cancel := context.WithDeadline(f.ctx, began.Add(f.recoveryBudget()))
	defer cancel()
	if err := poll(ctx, func() bool { return f.ownedBy(slow[0]) == 0 }); err != nil {
		f.t.Errorf("%s did not fence its sessions at %gx: %v", slow[0].name, from, err)
		return
	}
	st := &latencyStep{Scope: scopeOne, Factor: x, DownFrom: from}
	f.step(st, slow)
	f.heal(st, slow, began)
}

// ownedBy is how many sessions b serves now.
func (f *latencyFleet) ownedBy(b *bridge) int {
	owners, _ := f.owners()
	n := 0
	for _, o := range owners {
		if o == b {
			n++
		}
	}
	return n
}

// step adds st's round trip to the slow nodes' store paths, holds it for
// the dwell (sampling their store gauge) and, on one node's path, waits
// for every session to be served again within the recovery budget.
func (f *latencyFleet) step(st *latencyStep, slow []*bridge) {
	f.steps = append(f.steps, st)
	st.Delay = time.Duration(st.Factor * float64(f.report.Timing.RenewCallTimeout))
	for _, b := range slow {
		st.Slow = append(st.Slow, b.name)
	}
	owners, _ := f.owners()
	for _, b := range owners {
		if isIn(b, slow) {
			st.Owned++
		}
	}
	before := f.counters(st)
	st.From = time.Now()
	for _, b := range slow {
		if err := b.store.slow(st.Delay); err != nil {
			st.fail("%s store path: %v", b.name, err)
		}
	}
	f.sampleStore(st, slow, st.From.Add(f.dwell()))
	if st.Scope == scopeOne {
		f.waitServed(st, st.From)
	}
	st.To = time.Now()
	after := f.counters(st)
	for name, a := range after {
		b := before[name]
		st.RenewFailures += delta(b.renew, a.renew)
		st.Takeovers += delta(b.takeovers, a.takeovers)
	}
	f.judgeTakeovers(st, owners)
	st.Served = f.served()
	f.witness(st)
	f.t.Logf("%s", st.line())
	for _, e := range st.Errs {
		f.t.Errorf("%s, %s: %s", f.prof.Name, st.label(), e)
	}
}

func isIn(b *bridge, bs []*bridge) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

// delta is a counter's increase; a counter that went down belongs to a
// restarted process and counts from zero.
func delta(before, after float64) int {
	if after < before {
		return int(after)
	}
	return int(after - before)
}

// heal lifts the round trip and waits for every session to be served,
// within the recovery budget of the lift; st's Outage is the longest time
// a device went without a request from began (the staircase's or jump's
// start) to then.
func (f *latencyFleet) heal(st *latencyStep, slow []*bridge, began time.Time) {
	if st == nil {
		return
	}
	healed := time.Now()
	for _, b := range slow {
		if err := b.store.slow(0); err != nil {
			f.t.Errorf("%s store path: %v", b.name, err)
			return
		}
	}
	before := len(st.Errs)
	f.waitServed(st, healed)
	st.Recovery = time.Since(healed)
	st.Outage, _ = f.deviceLogs(began, time.Now())
	for _, e := range st.Errs[before:] {
		f.t.Errorf("%s, %s, after the round trip was lifted: %s", f.prof.Name, st.label(), e)
	}
	f.t.Logf("%s: every session served %s after the round trip was lifted; longest time without service since the start %s",
		st.label(), fs(st.Recovery), fs(st.Outage))
}

// sampleStore reads the slow nodes' leasebridge_lease_store_up until end
// (the step's dwell), and times a write to etcd straight, not through any
// proxy: the store's own part of every round trip, which the machine's
// load moves.
func (f *latencyFleet) sampleStore(st *latencyStep, slow []*bridge, end time.Time) {
	for time.Now().Before(end) {
		st.Base = append(st.Base, f.timeWrite())
		for _, b := range slow {
			if m, err := b.scrape(); err == nil {
				st.StoreSamples++
				if m["leasebridge_lease_store_up"] == 0 {
					st.StoreDown++
				}
			}
		}
		if sleepCtx(f.ctx, min(100*time.Millisecond, time.Until(end))) != nil {
			return
		}
	}
}

// timeWrite times one write to etcd, sent straight to it (-1: it failed).
func (f *latencyFleet) timeWrite() time.Duration {
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := f.etcd.Put(ctx, f.prof.Prefix+"probe", t0.String()); err != nil {
		return -1
	}
	return time.Since(t0)
}

// waitServed waits until every session is served, at most the recovery
// budget after since.
func (f *latencyFleet) waitServed(st *latencyStep, since time.Time) {
	limit := f.recoveryBudget()
	ctx, cancel := context.WithDeadline(f.ctx, since.Add(limit))
	defer cancel()
	if err := poll(ctx, func() bool { return f.served() == latencySessions }); err != nil {
		st.fail("%d of %d sessions served %s after %s, over the budget FenceAfter + owner_death %s",
			f.served(), latencySessions, fs(time.Since(since)), clock(since), fs(limit))
	}
}

// judgeTakeovers holds every session that changed owner during the step
// to the owner-death budget by its successor's FailureToFullDuration.
func (f *latencyFleet) judgeTakeovers(st *latencyStep, before map[string]*bridge) {
	after, states := f.owners()
	for s, b := range after {
		if before[s] == b {
			continue
		}
		if d := time.Duration(states[s].FailureToFullNS); d > f.report.OwnerDeath.Total {
			st.fail("%s taken over by %s with FailureToFullDuration %s > owner-death budget %s", s, b.name, fs(d), fs(f.report.OwnerDeath.Total))
		}
	}
}

// witness reads every device's request log over the step: the longest time
// without a request, and connections whose requests interleaved.
func (f *latencyFleet) witness(st *latencyStep) {
	var two []string
	st.Idle, two = f.deviceLogs(st.From, st.To)
	st.TwoClients = len(two)
	for _, o := range two {
		st.fail("two clients at a device: %s", o)
	}
}

// deviceLogs reads every device's request log over [from, to]: the longest
// time any device got no request (the window's ends count), and the pairs
// of connections whose requests interleaved.
func (f *latencyFleet) deviceLogs(from, to time.Time) (time.Duration, []string) {
	var idle time.Duration
	var two []string
	for i, d := range f.devs {
		var in []attributed
		for _, r := range d.requestLog() {
			if !r.At.Before(from) && !r.At.After(to) {
				in = append(in, r)
			}
		}
		prev := from
		for _, r := range in {
			idle = max(idle, r.At.Sub(prev))
			prev = r.At
		}
		idle = max(idle, to.Sub(prev))
		for _, o := range overlaps(summarise(in, to)) {
			two = append(two, fmt.Sprintf("plc%d: %s", i+1, o))
		}
	}
	return idle, two
}

// countFences reads the processes' logs once every step is over (a line
// is written after the act): each step's fenced and lost terms.
func (f *latencyFleet) countFences() {
	for _, b := range f.nodes {
		for _, l := range b.logEvents("ownership ended") {
			for _, st := range f.steps {
				if l.Time.Before(st.From) || l.Time.After(st.To) {
					continue
				}
				switch l.Event {
				case "fenced":
					st.Fences++
				case "lost":
					st.Lost++
				}
			}
		}
	}
}

// settle lifts every round trip, restarts an ended process and waits until
// every session has one serving owner and a standby.
func (f *latencyFleet) settle() error {
	for _, b := range f.nodes {
		if err := b.store.slow(0); err != nil {
			return err
		}
	}
	limit := 2 * f.report.OwnerDeath.Total
	ctx, cancel := context.WithTimeout(f.ctx, limit)
	defer cancel()
	var last string
	err := poll(ctx, func() bool {
		for _, b := range f.nodes {
			if !b.running() {
				f.t.Logf("%s ended: starting it again", b.name)
				b.start(f.t)
			}
		}
		var ok bool
		ok, last = f.settled()
		return ok
	})
	if err != nil {
		return fmt.Errorf("no serving owner and standby for every session within %s (%s): %w", fs(limit), last, err)
	}
	return nil
}

// settled reports whether every session has exactly one owner serving at
// ServiceLevelFull and a standby on every other node, or why not.
func (f *latencyFleet) settled() (bool, string) {
	owners := map[string]int{}
	for _, b := range f.nodes {
		sts, ok := b.sessionStates()
		if !ok {
			return false, b.name + " does not answer"
		}
		for _, s := range sts {
			switch {
			case s.Owner && s.Full && s.State == "serving":
				owners[s.Session]++
			case !s.Owner && s.State == "standby":
			default:
				return false, fmt.Sprintf("%s: %s %s owner=%v full=%v", b.name, s.Session, s.State, s.Owner, s.Full)
			}
		}
	}
	for i := range latencySessions {
		if s := fmt.Sprintf("s%d", i+1); owners[s] != 1 {
			return false, fmt.Sprintf("%s has %d serving owners", s, owners[s])
		}
	}
	return true, ""
}

// slowNodes are the nodes whose path a step slows: on one node, the one
// owning the most sessions.
func (f *latencyFleet) slowNodes(scope string) []*bridge {
	if scope == scopeEvery {
		return f.nodes
	}
	best, most := f.nodes[0], -1
	for _, b := range f.nodes {
		if n := f.ownedBy(b); n > most {
			best, most = b, n
		}
	}
	return []*bridge{best}
}

// owners maps each session served now to its owner, with the owner's
// status of it.
func (f *latencyFleet) owners() (map[string]*bridge, map[string]sessionState) {
	out, states := map[string]*bridge{}, map[string]sessionState{}
	for _, b := range f.nodes {
		sts, _ := b.sessionStates()
		for _, s := range sts {
			if s.Owner && s.Full && s.State == "serving" {
				out[s.Session], states[s.Session] = b, s
			}
		}
	}
	return out, states
}

// served is how many sessions a node serves now.
func (f *latencyFleet) served() int {
	o, _ := f.owners()
	return len(o)
}

// sessionState is what /sessions says of one session.
type sessionState struct {
	Session         string `json:"session"`
	State           string `json:"state"`
	Owner           bool   `json:"owner"`
	Full            bool   `json:"service_level_full"`
	FailureToFullNS int64  `json:"failure_to_full_ns"`
}

// sessionStates reads the process's /sessions; ok is false when it does
// not answer.
func (b *bridge) sessionStates() ([]sessionState, bool) {
	if !b.running() || b.isFrozen() {
		return nil, false
	}
	resp, err := httpClient.Get("http://" + b.http + "/sessions")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var out []sessionState
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, false
	}
	return out, true
}

// nodeCounters are one process's counters, summed over its sessions.
type nodeCounters struct{ renew, takeovers float64 }

// counters reads both processes' counters; a process that does not answer
// fails the step.
func (f *latencyFleet) counters(st *latencyStep) map[string]nodeCounters {
	out := map[string]nodeCounters{}
	for _, b := range f.nodes {
		m, err := b.scrape()
		if err != nil {
			st.fail("%s /metrics: %v", b.name, err)
			continue
		}
		out[b.name] = nodeCounters{renew: m["leasebridge_renew_failures_total"], takeovers: m["leasebridge_takeovers_total"]}
	}
	return out
}

// scrape reads the process's /metrics: each series' value summed over its
// labels, by metric name.
func (b *bridge) scrape() (map[string]float64, error) {
	resp, err := httpClient.Get("http://" + b.http + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(line[:i], "{")
		out[strings.TrimSpace(name)] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", b.name, err)
	}
	return out, nil
}
