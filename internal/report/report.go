// Package report renders admission results for people (text, Markdown) and
// for machines (JSON). The command line, the startup log and the generated
// docs all print through it, so they cannot disagree.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/buildinfo"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/routes/suggest"
)

// SchemaVersion is the admit --json schema_version. It changes only if a
// field is renamed or removed; added fields keep it.
const SchemaVersion = 1

// Admission is the JSON document `leasebridge admit --json` prints; its
// fields are documented in docs/admit-json.md.
type Admission struct {
	SchemaVersion      int                  `json:"schema_version"`
	LeasebridgeVersion string               `json:"leasebridge_version"`
	Admitted           bool                 `json:"admitted"`
	File               string               `json:"file"`
	DeploymentMode     string               `json:"deployment_mode,omitempty"`
	Sessions           []Session            `json:"sessions"`
	Errors             []*routes.FieldError `json:"errors"`
	// ErrorsNotListed counts the problems past routes.MaxProblems that
	// Errors leaves out; absent when it lists every one.
	ErrorsNotListed int `json:"errors_not_listed,omitempty"`
	// Warnings are settings that are valid but weaker than they look (an
	// even number of lease store members, routes.Config.StoreWarnings; a
	// write route with no writable tag, routes.Config.Warnings); absent
	// when there are none.
	Warnings []*routes.FieldError `json:"warnings,omitempty"`
	// DeploymentInputs are the passwords the deployment provides that are
	// missing here (a password_env not set, a password_file not
	// readable): admit notes them, run requires them.
	DeploymentInputs routes.Errors `json:"deployment_inputs"`
}

// Session is one session's admission outcome in JSON.
type Session struct {
	Session            string                      `json:"session"`
	Routes             []string                    `json:"routes"`
	Admitted           bool                        `json:"admitted"`
	OwnerDeathNS       *int64                      `json:"owner_death_ns"`
	BrokerPathNS       *int64                      `json:"broker_path_ns"`
	BrokerPathFailover string                      `json:"broker_path_failover"`
	DevicePathNS       *int64                      `json:"device_path_ns"`
	DevicePathFailover string                      `json:"device_path_failover"`
	DevicePathCooldown *int64                      `json:"device_path_cooldown_ns"`
	FailoverSLONS      *int64                      `json:"failover_slo_ns"`
	Terms              map[string]map[string]int64 `json:"terms"`
	Breakdown          map[string][]admission.Term `json:"breakdown"`
	Timing             admission.Timing            `json:"timing"`
	ActivationNS       int64                       `json:"activation_ns"`
	CloseBoundNS       int64                       `json:"close_bound_ns"`
	FenceAfterNS       int64                       `json:"fence_after_ns"`
	StoreElectionNS    *int64                      `json:"store_election_ns"`
	Refusals           []string                    `json:"refusals"`
	Warnings           []string                    `json:"warnings"`
	// Suggestions are the changes after which a session refused for its
	// failover_slo is admitted, each checked by admitting the changed file.
	Suggestions []suggest.Suggestion `json:"suggestions,omitempty"`
}

func ns(d time.Duration) *int64 {
	v := int64(d)
	return &v
}

func termMap(b admission.Budget) map[string]int64 {
	m := make(map[string]int64, len(b.Terms))
	for _, t := range b.Terms {
		m[t.Name] = int64(t.Value)
	}
	return m
}

// FromReports builds the JSON document for an admitted or refused file.
func FromReports(cfg *routes.Config, sessions []routes.Session, reports []admission.Report) Admission {
	a := Admission{SchemaVersion: SchemaVersion, LeasebridgeVersion: buildinfo.Read().Version, Admitted: true, File: cfg.File, DeploymentMode: string(cfg.DeploymentMode), Errors: []*routes.FieldError{},
		Warnings: cfg.StoreWarnings(), DeploymentInputs: routes.Errors{}}
	for i, r := range reports {
		s := Session{
			Session:            r.Session,
			Routes:             sessions[i].Routes,
			Admitted:           r.Admitted(),
			BrokerPathFailover: r.BrokerPathFailover,
			DevicePathFailover: r.DevicePathFailover,
			Terms:              map[string]map[string]int64{},
			Breakdown:          map[string][]admission.Term{},
			Timing:             r.Timing,
			ActivationNS:       int64(r.Activation),
			CloseBoundNS:       int64(r.CloseBound),
			FenceAfterNS:       int64(r.FenceAfter),
			Refusals:           append([]string{}, r.Refusals...),
			Warnings:           append([]string{}, r.Warnings...),
		}
		if r.StoreElection > 0 {
			s.StoreElectionNS = ns(r.StoreElection)
		}
		if len(r.OwnerDeath.Terms) > 0 {
			s.OwnerDeathNS = ns(r.OwnerDeath.Total)
			s.Terms["owner_death"] = termMap(r.OwnerDeath)
			s.Breakdown["owner_death"] = r.OwnerDeath.Terms
		}
		if r.BrokerPath != nil {
			s.BrokerPathNS = ns(r.BrokerPath.Total)
			s.Terms["broker_path"] = termMap(*r.BrokerPath)
			s.Breakdown["broker_path"] = r.BrokerPath.Terms
		}
		if r.DevicePath != nil {
			s.DevicePathNS = ns(r.DevicePath.Total)
			s.DevicePathCooldown = ns(r.DevicePathCooldown)
			s.Terms["device_path"] = termMap(*r.DevicePath)
			s.Breakdown["device_path"] = r.DevicePath.Terms
		}
		if r.FailoverSLO != nil {
			s.FailoverSLONS = ns(*r.FailoverSLO)
		}
		a.Admitted = a.Admitted && s.Admitted
		a.Sessions = append(a.Sessions, s)
	}
	return a
}

// Invalid builds the JSON document for a configuration that did not
// decode: the problems routes.Errors.Shown lists, and how many more there
// are.
func Invalid(file string, errs routes.Errors) Admission {
	shown, more := errs.Shown()
	return Admission{SchemaVersion: SchemaVersion, LeasebridgeVersion: buildinfo.Read().Version, File: file, Sessions: []Session{},
		Errors: shown, ErrorsNotListed: more, DeploymentInputs: routes.Errors{}}
}

// WriteJSON prints the document indented, with a trailing newline.
func WriteJSON(w io.Writer, a Admission) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}

// WriteText prints an admission result for an operator: per session the
// verdict, the resolved cadence with where each value came from, and every
// term of both budgets so the dominant one is visible.
func WriteText(w io.Writer, cfg *routes.Config, sessions []routes.Session, reports []admission.Report, suggestions map[string][]suggest.Suggestion) {
	fs := admission.FormatSeconds
	admitted := 0
	fmt.Fprintf(w, "%s: deployment_mode %s, lease store %s, %d session(s)\n", cfg.File, cfg.DeploymentMode, cfg.StoreBackend(), len(reports))
	for i, r := range reports {
		verdict := "REFUSED"
		if r.Admitted() {
			verdict = "admitted"
			admitted++
		}
		fmt.Fprintf(w, "\nsession %s: %s (routes: %s)\n", r.Session, verdict, strings.Join(sessions[i].Routes, ", "))
		for _, ref := range r.Refusals {
			fmt.Fprintf(w, "  refused: %s\n", ref)
		}
		WriteSuggestions(w, r, suggestions[r.Session])
		if len(r.OwnerDeath.Terms) == 0 {
			continue
		}
		WriteTiming(w, "  ", r.Timing)
		slo := "no failover_slo declared"
		if r.FailoverSLO != nil {
			slo = "failover_slo " + fs(*r.FailoverSLO)
		}
		fmt.Fprintf(w, "  %s\n", slo)
		writeBudget(w, "owner-death budget", r.OwnerDeath)
		switch {
		case r.BrokerPath != nil:
			writeBudget(w, "broker-path budget", *r.BrokerPath)
		case r.BrokerPathFailover == "off":
			fmt.Fprintf(w, "  broker_path_failover: off (broker_health_step_down: off; the objective covers owner death alone)\n")
		default:
			fmt.Fprintf(w, "  broker_path_failover: undecided (broker_health_step_down omitted)\n")
		}
		if r.DevicePath != nil {
			writeBudget(w, "device-path budget", *r.DevicePath)
			fmt.Fprintf(w, "  device_path_cooldown: %s (a node that released the session for its device path does not compete for it this long)\n", fs(r.DevicePathCooldown))
		} else {
			fmt.Fprintf(w, "  device_path_failover: off (device_path_step_down: off; an unreachable device keeps its owner, which publishes the outage)\n")
		}
		fmt.Fprintf(w, "  self-fence: the owner closes %s after sending its last successful renew (lease_ttl %s - close bound %s - clock-rate margin %s)\n",
			fs(r.FenceAfter), fs(r.Timing.LeaseTTL), fs(r.CloseBound), fs(admission.ClockRateMargin(r.Timing.LeaseTTL)))
		writeStore(w, r)
	}
	fmt.Fprintf(w, "\n%d of %d session(s) admitted\n", admitted, len(reports))
}

// writeStore prints, for a fleet that runs its lease store itself, the
// store's election bound and what of it the owner-death budget charges,
// then the report's warnings.
func writeStore(w io.Writer, r admission.Report) {
	fs := admission.FormatSeconds
	if r.StoreElection > 0 {
		var charged, term time.Duration
		for _, t := range r.OwnerDeath.Terms {
			switch t.Name {
			case "observation_calls":
				charged = t.Value
			case "store_recovery":
				term = t.Value
			}
		}
		fmt.Fprintf(w, "  store election: the fleet runs its lease store, which elects a leader within E = %s; a standby may then take over up to E + 3*renew_call_timeout after lease_ttl and the poll boundaries, observation_calls charges %s, store_recovery the rest: %s\n",
			fs(r.StoreElection), fs(charged), fs(term))
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

// WriteSuggestions prints the changes that would admit a session refused
// for its objective: each single key, else the fewest keys together, and
// the objective raised.
func WriteSuggestions(w io.Writer, r admission.Report, sugg []suggest.Suggestion) {
	if len(sugg) == 0 || r.FailoverSLO == nil {
		return
	}
	fs := admission.FormatSeconds
	slo := fs(*r.FailoverSLO)
	single := sugg[0].Kind == suggest.KindKey
	if single {
		fmt.Fprintf(w, "  fits failover_slo %s with any one of these changes (each checked by admitting the changed file):\n", slo)
	} else {
		fmt.Fprintf(w, "  no single key fits failover_slo %s.\n", slo)
	}
	for _, s := range sugg {
		switch s.Kind {
		case suggest.KindKeys:
			fmt.Fprintf(w, "  these %d keys together fit it (budget %s, checked by admitting the changed file):\n", len(s.Changes), fs(time.Duration(s.BudgetNS)))
		case suggest.KindObjective:
			fmt.Fprintf(w, "  or raise the objective to the budget:\n")
		}
		for _, c := range s.Changes {
			if s.Kind == suggest.KindKey {
				fmt.Fprintf(w, "    %s (budget %s)\n", c, fs(time.Duration(s.BudgetNS)))
				continue
			}
			fmt.Fprintf(w, "    %s\n", c)
		}
	}
}

// WriteTiming prints a resolved cadence, one value per line with its origin.
func WriteTiming(w io.Writer, indent string, t admission.Timing) {
	fs := admission.FormatSeconds
	row := func(key, val string) []string { return []string{indent + key, val, "(" + string(t.Origins[key]) + ")"} }
	columns(w, [][]string{
		row("lease_ttl", fs(t.LeaseTTL)),
		row("renew_interval", fs(t.RenewInterval)),
		row("lease_renew_jitter", fs(t.RenewJitter)),
		row("renew_call_timeout", fs(t.RenewCallTimeout)),
		row("acquire_poll_interval", fs(t.AcquirePollInterval)),
		row("step_down_grace", fs(t.StepDownGrace)),
		row("max_renew_fails", strconv.Itoa(t.MaxRenewFails)),
	}, false)
}

func writeBudget(w io.Writer, title string, b admission.Budget) {
	fs := admission.FormatSeconds
	fmt.Fprintf(w, "  %s: %s\n", title, fs(b.Total))
	rows := make([][]string, 0, len(b.Terms))
	var entries []admission.Term
	for _, t := range b.Terms {
		why, byEntry := explain(t)
		if byEntry {
			entries = append(entries, t)
		}
		rows = append(rows, []string{"    " + t.Name, fs(t.Value), Share(t.Value, b.Total), why})
	}
	columns(w, rows, true)
	for _, t := range entries {
		fmt.Fprintf(w, "    %s by entry:\n", t.Name)
		for _, g := range t.Groups() {
			fmt.Fprintf(w, "      %s\n", g.Explain())
		}
	}
}

// Share is part's share of total as the text report prints it
// ("72.2%"), rounded once, so a refusal and the table agree.
func Share(part, total time.Duration) string {
	return fmt.Sprintf("%5.1f%%", admission.SharePercent(part, total))
}

// explain is the text after a term's share: what its keys make of it,
// or, for a term made of several entries (activation), each entry's
// total, whose keys byEntry says to list below the table. A term that is
// one key at its own value needs no words.
func explain(t admission.Term) (why string, byEntry bool) {
	groups := t.Groups()
	switch {
	case len(groups) == 0:
		return "", false
	case len(groups) > 1 || groups[0].Entry != "":
		sums := make([]string, len(groups))
		for i, g := range groups {
			sums[i] = g.Entry + " " + admission.FormatSeconds(g.Total)
		}
		return "  = " + strings.Join(sums, " + "), true
	}
	p := groups[0].Parts
	if len(p) == 1 && p[0].Count == 1 && p[0].Of == "" && p[0].Key == t.Name {
		return "", false
	}
	parts := make([]string, len(p))
	for i, x := range p {
		parts[i] = x.String()
	}
	why = "  = " + strings.Join(parts, " + ")
	if t.Note != "" {
		why += "; " + t.Note
	}
	return why, false
}

// columns writes one aligned block as text/tabwriter does with padding 2
// and spaces: every cell of a row but the last is padded to the widest
// cell of its column plus 2, after its text or, with right, before it; the
// last follows unpadded. It replaces a tabwriter per block, whose buffers
// a report of thousands of sessions allocated thousands of times.
func columns(w io.Writer, rows [][]string, right bool) {
	var widths []int
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c)+2)
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if right {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		b.WriteString(r[len(r)-1] + "\n")
	}
	io.WriteString(w, b.String())
}

// Profile is one shipped profile evaluated at the MQTT transport's defaults
// and startup_allowance 0.
type Profile struct {
	Mode       admission.Mode   `json:"profile"`
	Timing     admission.Timing `json:"timing"`
	Activation time.Duration    `json:"activation_ns"`
	OwnerDeath admission.Budget `json:"owner_death"`
	// BrokerPathBase is the broker-path budget without its threshold term:
	// the budget is broker_health_step_down + BrokerPathBase.
	BrokerPathBase time.Duration    `json:"broker_path_without_threshold_ns"`
	BrokerPath     admission.Budget `json:"broker_path_at_zero_threshold"`
}

// Profiles lists the shipped profiles in table order.
var Profiles = []admission.Mode{admission.Standalone, admission.Clustered}

// EvaluateProfile computes one profile's row.
func EvaluateProfile(mode admission.Mode) (Profile, error) {
	t, err := admission.ResolveTiming(mode, admission.Overrides{})
	if err != nil {
		return Profile{}, err
	}
	act, err := admission.MQTTActivationBound(routes.DefaultMQTTConnectTimeout, routes.DefaultMQTTReconcileTimeout, routes.DefaultMQTTUnmatchedGrace)
	if err != nil {
		return Profile{}, err
	}
	od, err := admission.OwnerDeath(t, act, 0)
	if err != nil {
		return Profile{}, err
	}
	bp, err := admission.BrokerPath(t, 0, act, 0)
	if err != nil {
		return Profile{}, err
	}
	return Profile{Mode: mode, Timing: t, Activation: act, OwnerDeath: od, BrokerPathBase: bp.Total, BrokerPath: bp}, nil
}

// WriteProfile prints one profile for `leasebridge budget`.
func WriteProfile(w io.Writer, p Profile) {
	fs := admission.FormatSeconds
	fmt.Fprintf(w, "profile %s (deployment_mode: %s, no pinned lease timing)\n", p.Mode, p.Mode)
	fmt.Fprintf(w, "evaluated with the MQTT transport at its defaults (connect_timeout %s, reconcile_timeout %s, unmatched_grace %s: activation %s) and startup_allowance 0s\n\n",
		fs(routes.DefaultMQTTConnectTimeout), fs(routes.DefaultMQTTReconcileTimeout), fs(routes.DefaultMQTTUnmatchedGrace), fs(p.Activation))
	WriteTiming(w, "  ", p.Timing)
	fmt.Fprintln(w)
	writeBudget(w, "owner-death budget", p.OwnerDeath)
	fmt.Fprintf(w, "  broker-path budget: broker_health_step_down + %s, where broker_health_step_down is the threshold the file sets\n", fs(p.BrokerPathBase))
	var rows [][]string
	for _, t := range p.BrokerPath.Terms {
		if t.Name == "broker_health_step_down" {
			continue
		}
		why, _ := explain(t)
		rows = append(rows, []string{"    " + t.Name, fs(t.Value), why})
	}
	columns(w, rows, true)
}

// ProfileTable renders the shipped profiles (modes, or every one when
// none is given) as the Markdown table of docs/failover-budget.md.
func ProfileTable(modes ...admission.Mode) (string, error) {
	if len(modes) == 0 {
		modes = Profiles
	}
	var b strings.Builder
	b.WriteString("| Profile | lease_ttl | renew_interval | lease_renew_jitter | renew_call_timeout | acquire_poll_interval | step_down_grace | Owner-death budget | Broker-path budget |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	short := admission.FormatSecondsShort
	for _, m := range modes {
		p, err := EvaluateProfile(m)
		if err != nil {
			return "", err
		}
		t := p.Timing
		cell := func(key string, d time.Duration) string {
			if o := t.Origins[key]; o == admission.Derived {
				return short(d) + " derived"
			}
			return short(d)
		}
		fmt.Fprintf(&b, "| %s (`deployment_mode: %s`) | %s | %s | %s | %s | %s | %s | %s | broker_health_step_down + %s |\n",
			m, m, cell("lease_ttl", t.LeaseTTL), cell("renew_interval", t.RenewInterval), cell("lease_renew_jitter", t.RenewJitter),
			cell("renew_call_timeout", t.RenewCallTimeout), cell("acquire_poll_interval", t.AcquirePollInterval),
			cell("step_down_grace", t.StepDownGrace), short(p.OwnerDeath.Total), short(p.BrokerPathBase))
	}
	return b.String(), nil
}
