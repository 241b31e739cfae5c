// Package suggest finds, for a session `leasebridge admit` refuses only
// because a budget exceeds its failover_slo, the smallest changes of the
// configuration's keys that would admit it: each single key that fits
// alone, else the fewest keys scaled together, and the objective raised
// to the budget. Every change is checked by admitting the changed file.
package suggest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/routes"
)

// Evaluator admits a configuration's text as `leasebridge admit` does
// (every transport built, none opened) and returns each session's report
// by name, or an error when the text is not a valid configuration.
type Evaluator func(data []byte) (map[string]admission.Report, error)

// Change is one key of a configuration set to a new value.
type Change struct {
	// Path is the key path ("brokers.local.connect_timeout",
	// "manager.lease_ttl", "routes[0].manager.failover_slo").
	Path string `json:"path"`
	File string `json:"file"`
	// Line is the key's line; when Add, the line of the block it goes
	// under (Under), or 0 when that block is missing too.
	Line int  `json:"line"`
	Add  bool `json:"add"`
	// Under is the path of the block an added key goes under; empty for
	// the top level.
	Under string `json:"under,omitempty"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// String prints the change as an operator applies it.
func (c Change) String() string {
	if c.Add {
		// What is added below the block that exists: the key, or the
		// key with the blocks above it that are missing too.
		key, where := c.Path, "at the top level"
		if c.Under != "" {
			key, where = strings.TrimPrefix(c.Path, c.Under+"."), "under "+c.Under
		}
		return fmt.Sprintf("%s:%d: add %s: %s %s (now %s)", c.File, c.Line, key, c.To, where, c.From)
	}
	return fmt.Sprintf("%s:%d: %s: %s -> %s", c.File, c.Line, c.Path, c.From, c.To)
}

// Suggestion kinds.
const (
	KindKey       = "key"       // one key
	KindKeys      = "keys"      // several keys, when no single one fits
	KindObjective = "objective" // failover_slo raised to the budget
)

// Suggestion is a change after which a refused session is admitted: the
// changed configuration was evaluated and admits the session, and every
// session admitted before stays admitted.
type Suggestion struct {
	Kind    string   `json:"kind"`
	Changes []Change `json:"changes"`
	// BudgetNS is the session's largest budget after the change.
	BudgetNS int64 `json:"budget_ns"`
}

// MaxBytes bounds the files admit searches for suggestions: each
// candidate value is checked by admitting the whole changed file.
const MaxBytes = 256 << 10

// MaxSessions bounds how many refused sessions of one file admit
// searches suggestions for.
const MaxSessions = 10

// knobFloor is the smallest value a suggestion sets a duration to.
const knobFloor = 100 * time.Millisecond

// knob is one key a refused session's budgets are made of.
type knob struct {
	path string
	cur  time.Duration
	// share is how much of the session's budgets the key makes, summed.
	share time.Duration
}

// For lists the changes after which session s, refused only because
// a budget exceeds its failover_slo, is admitted: each single key that
// alone fits the objective at the value closest to its current one;
// when none does, the fewest keys that fit together, each scaled by the
// same factor; and the objective raised to the budget. Each value is
// found by evaluating changed configurations with eval, admission's own
// arithmetic, and kept only when the changed file admits the session.
// data is c's text; r is s's report in it.
func For(c *routes.Config, data []byte, s routes.Session, r admission.Report, eval Evaluator) []Suggestion {
	if r.Admitted() || r.FailoverSLO == nil || len(s.Refusals) > 0 || len(data) > MaxBytes {
		return nil
	}
	in := s.Inputs
	in.FailoverSLO = nil
	if rep := admission.Evaluate(in); !rep.Admitted() || len(s.Shared) > 0 {
		return nil // refused for more than the objective: a key change alone would not do
	}
	base, err := eval(data)
	if err != nil {
		return nil
	}
	sg := &suggester{c: c, data: data, session: s.Name, slo: *r.FailoverSLO, eval: eval, base: base}
	knobs := sg.knobs(s, r)
	var out []Suggestion
	for _, k := range knobs {
		if v, ok := sg.largest(func(f float64) []time.Duration { return []time.Duration{scale(k.cur, f)} }, []knob{k}); ok {
			out = append(out, v)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].BudgetNS > out[j].BudgetNS })
	if len(out) == 0 {
		if v, ok := sg.combined(knobs); ok {
			out = append(out, v)
		}
	}
	if v, ok := sg.objective(s, r); ok {
		out = append(out, v)
	}
	return out
}

type suggester struct {
	c       *routes.Config
	data    []byte
	session string
	slo     time.Duration
	eval    Evaluator
	base    map[string]admission.Report
}

// knobs lists the keys of r's budgets that count, once each, at the
// path the session takes them from, the largest share first.
func (sg *suggester) knobs(s routes.Session, r admission.Report) []knob {
	var out []knob
	seen := map[string]int{}
	for _, b := range []*admission.Budget{&r.OwnerDeath, r.BrokerPath, r.DevicePath} {
		if b == nil {
			continue
		}
		for _, t := range b.Terms {
			for _, p := range t.Parts {
				path, cur, ok := sg.knobOf(s, r.Timing, p)
				if !ok || cur <= knobFloor || p.Count == 0 {
					continue
				}
				if i, ok := seen[path]; ok {
					out[i].share += time.Duration(p.Count) * p.Each
					continue
				}
				seen[path] = len(out)
				out = append(out, knob{path, cur, time.Duration(p.Count) * p.Each})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].share > out[j].share })
	return out
}

// knobOf is the path and current value of the key behind part p.
func (sg *suggester) knobOf(s routes.Session, t admission.Timing, p admission.Part) (string, time.Duration, bool) {
	if strings.HasPrefix(p.Entry, "brokers.") || strings.HasPrefix(p.Entry, "devices.") {
		if p.Of != "" {
			return "", 0, false
		}
		return p.Entry + "." + p.Key, p.Each, true
	}
	if p.Entry != "" && p.Entry != routes.EndpointClaim {
		return "", 0, false // a transport that did not disclose its keys
	}
	cur, ok := timingValue(t, p)
	if !ok {
		return "", 0, false
	}
	return managerPath(sg.c, s, p.Key), cur, true
}

// timingValue is the current value of the lease key behind p.
func timingValue(t admission.Timing, p admission.Part) (time.Duration, bool) {
	switch p.Key {
	case "lease_ttl":
		return t.LeaseTTL, true
	case "renew_interval":
		return t.RenewInterval, true
	case "lease_renew_jitter":
		return t.RenewJitter, true
	case "renew_call_timeout":
		return t.RenewCallTimeout, true
	case "acquire_poll_interval":
		return t.AcquirePollInterval, true
	case "step_down_grace":
		return t.StepDownGrace, true
	case "startup_allowance", "broker_health_step_down", "device_path_step_down":
		return p.Each, p.Of == ""
	}
	return 0, false
}

// managerPath is where session s takes manager key from: the manager
// block of the first of its routes that writes it, else the file's.
func managerPath(c *routes.Config, s routes.Session, key string) string {
	for i, r := range c.Routes {
		if slices.Contains(s.Routes, r.Name) {
			p := fmt.Sprintf("routes[%d].manager.%s", i, key)
			if c.Written(p) {
				return p
			}
		}
	}
	return "manager." + key
}

// scale is f x d, at least knobFloor, rounded down to two significant
// digits so the value reads as an operator would write it.
func scale(d time.Duration, f float64) time.Duration {
	v := max(knobFloor, time.Duration(float64(d)*f))
	return roundDown(v)
}

func roundDown(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	unit := time.Duration(math.Pow10(int(math.Floor(math.Log10(float64(d)))) - 1))
	return max(time.Millisecond, d/unit*unit)
}

// largest finds the largest factor f in (0, 1] at which the knobs set to
// values(f) admit the session, on a coarse grid refined by bisection
// (the budget need not shrink monotonically with every key: lease_ttl
// below its derivation is refused), and returns that change.
func (sg *suggester) largest(values func(float64) []time.Duration, ks []knob) (Suggestion, bool) {
	const steps = 20
	var best Suggestion
	lo := -1.0
	for i := steps - 1; i >= 0; i-- {
		f := float64(i) / steps
		if s, ok := sg.try(ks, values(f)); ok {
			best, lo = s, f
			break
		}
	}
	if lo < 0 {
		return Suggestion{}, false
	}
	hi := lo + 1.0/steps
	for range 10 {
		mid := (lo + hi) / 2
		if s, ok := sg.try(ks, values(mid)); ok {
			best, lo = s, mid
		} else {
			hi = mid
		}
	}
	return best, true
}

// try evaluates the configuration with each knob set to its value.
func (sg *suggester) try(ks []knob, vals []time.Duration) (Suggestion, bool) {
	changes := make([]Change, len(ks))
	for i, k := range ks {
		changes[i] = Change{Path: k.path, From: admission.FormatSeconds(k.cur), To: admission.FormatSeconds(vals[i])}
	}
	return sg.check(changes)
}

// check applies changes to the file's text, evaluates it, and reports
// the suggestion when the session is admitted and no session admitted
// before is refused.
func (sg *suggester) check(changes []Change) (Suggestion, bool) {
	data, changes, err := Apply(sg.c.File, sg.data, changes)
	if err != nil {
		return Suggestion{}, false
	}
	reps, err := sg.eval(data)
	if err != nil {
		return Suggestion{}, false
	}
	r, ok := reps[sg.session]
	if !ok || !r.Admitted() {
		return Suggestion{}, false
	}
	for name, before := range sg.base {
		if after, ok := reps[name]; before.Admitted() && (!ok || !after.Admitted()) {
			return Suggestion{}, false
		}
	}
	kind := KindKey
	if len(changes) > 1 {
		kind = KindKeys
	}
	return Suggestion{Kind: kind, Changes: changes, BudgetNS: int64(largestBudget(r))}, true
}

func largestBudget(r admission.Report) time.Duration {
	m := r.OwnerDeath.Total
	if r.BrokerPath != nil {
		m = max(m, r.BrokerPath.Total)
	}
	if r.DevicePath != nil {
		m = max(m, r.DevicePath.Total)
	}
	return m
}

// combined is the fewest knobs, largest contribution first, that fit
// together when each is scaled by one factor, as large as fits.
func (sg *suggester) combined(ks []knob) (Suggestion, bool) {
	for n := 2; n <= len(ks); n++ {
		set := ks[:n]
		vals := func(f float64) []time.Duration {
			out := make([]time.Duration, len(set))
			for i, k := range set {
				out[i] = scale(k.cur, f)
			}
			return out
		}
		if s, ok := sg.largest(vals, set); ok {
			return s, true
		}
	}
	return Suggestion{}, false
}

// objective is failover_slo raised to the session's largest budget,
// rounded up to two significant digits.
func (sg *suggester) objective(s routes.Session, r admission.Report) (Suggestion, bool) {
	need := largestBudget(r)
	unit := time.Duration(math.Pow10(int(math.Floor(math.Log10(float64(need)))) - 1))
	to := (need + unit - 1) / unit * unit
	ch := Change{Path: managerPath(sg.c, s, "failover_slo"), From: admission.FormatSeconds(sg.slo), To: admission.FormatSeconds(to)}
	out, ok := sg.check([]Change{ch})
	out.Kind = KindObjective
	return out, ok
}

// ErrNoPath reports a change whose key path cannot be followed.
var ErrNoPath = errors.New("suggest: key path not in the configuration")

// Apply sets each change's key in the YAML text, adding it (and any
// missing block above it) when absent, and returns the new text and the
// changes with File, Line, Add and Under filled in from the original.
func Apply(file string, data []byte, changes []Change) ([]byte, []Change, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, err
	}
	if len(doc.Content) != 1 {
		return nil, nil, ErrNoPath
	}
	out := make([]Change, len(changes))
	for i, ch := range changes {
		ch.File = file
		if err := set(doc.Content[0], splitPath(ch.Path), &ch); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", ch.Path, err)
		}
		out[i] = ch
	}
	b, err := yaml.Marshal(&doc)
	return b, out, err
}

// splitPath splits "routes[0].manager.lease_ttl" into routes, [0],
// manager, lease_ttl.
func splitPath(p string) []string {
	var out []string
	for _, seg := range strings.Split(p, ".") {
		if i := strings.IndexByte(seg, '['); i > 0 {
			out = append(out, seg[:i], seg[i:])
			continue
		}
		out = append(out, seg)
	}
	return out
}

// set walks n along path and sets its last key to ch.To, recording in ch
// where the key was or the block it is added under.
func set(n *yaml.Node, path []string, ch *Change) error {
	var walked []string
	blockLine := 0 // the line of the key whose value n is
	for i, seg := range path {
		last := i == len(path)-1
		if strings.HasPrefix(seg, "[") {
			idx, err := strconv.Atoi(strings.Trim(seg, "[]"))
			if err != nil || n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return ErrNoPath
			}
			n = n.Content[idx]
			blockLine = n.Line
			walked[len(walked)-1] += seg
			continue
		}
		if n.Kind != yaml.MappingNode {
			return ErrNoPath
		}
		var val *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == seg {
				val = n.Content[j+1]
				if last {
					ch.Line = n.Content[j].Line
				}
				blockLine = n.Content[j].Line
			}
		}
		if val == nil {
			if !ch.Add {
				ch.Add, ch.Under = true, strings.Join(walked, ".")
				if len(walked) > 0 {
					ch.Line = blockLine
				}
			}
			val = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			if last {
				val = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str"}
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: seg}, val)
		}
		if last {
			*val = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ch.To}
		}
		n = val
		walked = append(walked, seg)
	}
	return nil
}
