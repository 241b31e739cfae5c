package admission

import (
	"fmt"
	"strings"
	"time"
)

// Part is one key's share of a budget term: Count x Each. Each is the
// key's own value, or, when Of says how, a value computed from it (a poll
// boundary from acquire_poll_interval). The parts of a term add up to it,
// so an operator sees which key to change and by how much it moves the
// term.
type Part struct {
	// Entry is the configuration entry the key belongs to
	// ("brokers.local", "devices.plc"), or a lease-store call of the
	// activation ("lease:endpoint_claim"); empty for the session's lease
	// timing (the manager block).
	Entry string        `json:"entry,omitempty"`
	Key   string        `json:"key"`
	Count int64         `json:"count"`
	Each  time.Duration `json:"each_ns"`
	// Of is how Each follows from the key's value; empty when Each is it.
	Of string `json:"of,omitempty"`
}

// String prints the part as "3 x connect_timeout 30s", or with Of
// "2 x 6.25s (5/4 x acquire_poll_interval 5s)".
func (p Part) String() string {
	if p.Of != "" {
		return fmt.Sprintf("%d x %s (%s)", p.Count, FormatSeconds(p.Each), p.Of)
	}
	return fmt.Sprintf("%d x %s %s", p.Count, p.Key, FormatSeconds(p.Each))
}

// keyed is a term with its parts.
func keyed(name string, v time.Duration, parts ...Part) Term {
	return Term{Name: name, Value: v, Parts: parts}
}

// lease is a part that is one of the session's lease keys itself.
func lease(key string, count int64, each time.Duration) Part {
	return Part{Key: key, Count: count, Each: each}
}

// derived is a part computed from a lease key; of is a format whose
// durations print as seconds.
func derived(key string, count int64, each time.Duration, of string, args ...time.Duration) Part {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = FormatSeconds(a)
	}
	return Part{Key: key, Count: count, Each: each, Of: fmt.Sprintf(of, vals...)}
}

// pollParts are count poll boundaries, each ceil(5/4 x acquire_poll_interval).
func pollParts(t Timing, pb time.Duration, count int64) Part {
	return derived("acquire_poll_interval", count, pb, "5/4 x acquire_poll_interval %s", t.AcquirePollInterval)
}

// activationParts lists each transport's parts under its entry: the keys
// it disclosed, or its bound as one part when it disclosed none.
func activationParts(trs []Activation) []Part {
	var out []Part
	for _, tr := range trs {
		entry := tr.Entry
		if entry == "" {
			entry = tr.Name
		}
		if len(tr.Parts) == 0 {
			out = append(out, Part{Entry: entry, Key: "activation_bound", Count: 1, Each: tr.Bound})
			continue
		}
		for _, p := range tr.Parts {
			p.Entry = entry
			out = append(out, p)
		}
	}
	return out
}

// explainActivation gives b's activation term the transports' parts.
func explainActivation(b *Budget, trs []Activation) {
	if b == nil {
		return
	}
	for i := range b.Terms {
		if b.Terms[i].Name == "activation" {
			b.Terms[i].Parts = activationParts(trs)
		}
	}
}

// Group is the parts of one entry within a term and their sum.
type Group struct {
	Entry string
	Parts []Part
	Total time.Duration
}

// Groups splits a term's parts by entry, in their order.
func (t Term) Groups() []Group {
	var out []Group
	for _, p := range t.Parts {
		if len(out) == 0 || out[len(out)-1].Entry != p.Entry {
			out = append(out, Group{Entry: p.Entry})
		}
		g := &out[len(out)-1]
		g.Parts = append(g.Parts, p)
		g.Total += time.Duration(p.Count) * p.Each
	}
	return out
}

// Explain prints the group as "brokers.local: 3 x connect_timeout 30s +
// 3 x reconcile_timeout 30s + 2 x unmatched_grace 30s = 240s"; a group of
// the lease timing has no "entry:" prefix.
func (g Group) Explain() string {
	parts := make([]string, len(g.Parts))
	for i, p := range g.Parts {
		parts[i] = p.String()
	}
	s := strings.Join(parts, " + ") + " = " + FormatSeconds(g.Total)
	if g.Entry != "" {
		s = g.Entry + ": " + s
	}
	return s
}
