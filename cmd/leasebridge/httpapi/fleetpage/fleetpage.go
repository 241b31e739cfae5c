// Package fleetpage is the fleet page served at GET / on http_listen: one
// server-rendered HTML page, read-only, with every node and session of the
// fleet as this node reads them from the lease store (the data of GET
// /fleet) beside what this node itself knows of each session (the data of
// GET /sessions: the last failover it measured, its devices, an endpoint
// conflict). Plant networks are often offline, so the page loads nothing
// else: its CSS is inline, it has no script, and it refreshes itself with
// a meta refresh.
package fleetpage

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/lease"
)

// Refresh is how often the page reloads itself.
const Refresh = 5 * time.Second

// Source is what the page reads; *failover.Supervisor is one.
type Source interface {
	// Node is this process's node name.
	Node() string
	// Status is this process's view of its sessions (GET /sessions).
	Status() []failover.SessionStatus
	// FleetStatus is the fleet read from the lease store (GET /fleet).
	FleetStatus(ctx context.Context, now time.Time) (fleetview.Status, error)
}

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("fleet").Funcs(template.FuncMap{"join": strings.Join}).Parse(pageHTML))

// Handler serves the page. A store without fleet rows answers 200 with a
// message saying so and this node's sessions; a store that cannot be read
// answers 503 with the error and this node's sessions.
func Handler(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		st, err := src.FleetStatus(r.Context(), now)
		p := build(src.Node(), st, src.Status(), now)
		code := http.StatusOK
		switch {
		case errors.Is(err, failover.ErrNoFleet):
			p.NoFleet = true
		case err != nil:
			p.StoreError = err.Error()
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_ = pageTmpl.Execute(w, p)
	}
}

// page is the template's data.
type page struct {
	Node       string
	KeyPrefix  string
	CheckedAt  string
	RefreshS   int
	NoFleet    bool
	StoreError string
	AllOwned   bool
	Nodes      []nodeRow
	Sessions   []sessionRow
}

type nodeRow struct {
	Name, Owner, State, Age string
	This, Draining          bool
	Held, Serving, Pinned   []string
}

type sessionRow struct {
	Name, Status, OwnerNode, Owner, ServiceLevel string
	Epoch                                        uint64
	// Local is this node's state of the session; Devices its devices as
	// this node (the owner) last reached them, empty on a standby.
	Local, Devices       string
	DevicesAllUp         bool
	Failover             *failoverCell
	TimingMismatch       string
	Conflict, Handover   string
	LiveEligible, Pinned []string
}

// failoverCell is the last failover this node measured for a session.
type failoverCell struct {
	Cause, Measured, Budget, Share string
	MeasuredNS, BudgetNS           int64
	Within                         bool
}

// build joins the fleet view and this node's sessions into the page.
func build(node string, st fleetview.Status, local []failover.SessionStatus, now time.Time) page {
	p := page{Node: node, KeyPrefix: st.KeyPrefix, CheckedAt: now.UTC().Format("2006-01-02 15:04:05 UTC"),
		RefreshS: int(Refresh / time.Second), AllOwned: st.AllOwned}
	// What a node holds is read from the session rows, not from its node
	// row: a dead node's row keeps listing what it owned when it died.
	pinned, held := map[string][]string{}, map[string][]string{}
	for _, s := range st.Sessions {
		for _, n := range s.Pinning.Nodes {
			pinned[n] = append(pinned[n], s.Session)
		}
		if s.Status == fleetview.Owned {
			held[s.Node] = append(held[s.Node], s.Session)
		}
	}
	for _, n := range st.Nodes {
		p.Nodes = append(p.Nodes, nodeRowOf(n, node, pinned[n.Node], held[n.Node]))
	}
	byName := map[string]failover.SessionStatus{}
	for _, s := range local {
		byName[s.Session] = s
	}
	seen := map[string]bool{}
	for _, s := range st.Sessions {
		seen[s.Session] = true
		row := sessionRow{Name: s.Session, Status: s.Status, OwnerNode: s.Node, Owner: s.Owner, Epoch: s.Epoch,
			ServiceLevel: s.ServiceLevel, LiveEligible: s.LiveEligible, Pinned: s.Pinning.Nodes}
		if m := s.TimingMismatch; m != nil {
			row.TimingMismatch = timingDiff(m.File, m.Row)
		}
		if h := s.Handover; h != nil {
			row.Handover = "to " + orAny(h.To)
		}
		p.Sessions = append(p.Sessions, withLocal(row, byName[s.Session]))
	}
	// Without fleet rows (or before the store answered) this node's own
	// sessions are still shown.
	for _, s := range local {
		if !seen[s.Session] {
			p.Sessions = append(p.Sessions, withLocal(sessionRow{Name: s.Session}, s))
		}
	}
	return p
}

func nodeRowOf(n fleetview.Node, this string, pinned, held []string) nodeRow {
	r := nodeRow{Name: n.Node, Owner: n.Owner, This: n.Node == this, Draining: n.Draining,
		Held: held, Pinned: pinned, Age: admission.FormatSecondsShort(time.Duration(n.AgeNS))}
	for _, s := range n.Serving {
		if n.Live && slices.Contains(held, s) {
			r.Serving = append(r.Serving, s)
		}
	}
	switch {
	case n.Stopped:
		r.State = "stopped"
	case n.Live:
		r.State = "live"
	default:
		r.State = "down"
	}
	return r
}

// withLocal adds what this node knows of the session.
func withLocal(row sessionRow, s failover.SessionStatus) sessionRow {
	if s.Session == "" {
		return row
	}
	row.Local = s.State
	row.Conflict = s.EndpointConflict
	if row.TimingMismatch == "" && s.TimingMismatch != nil {
		row.TimingMismatch = timingDiff(s.TimingMismatch.Own, s.TimingMismatch.Row)
	}
	if s.Owner && len(s.Devices) == 0 {
		row.Devices, row.DevicesAllUp = "no devices", true // a bridge-only session
	}
	if len(s.Devices) > 0 {
		up := 0
		var down []string
		for _, d := range s.Devices {
			if d.Up {
				up++
			} else {
				down = append(down, d.Device)
			}
		}
		row.Devices = fmt.Sprintf("%d of %d up", up, len(s.Devices))
		if len(down) > 0 {
			row.Devices += " (down: " + strings.Join(down, ", ") + ")"
		}
		row.DevicesAllUp = up == len(s.Devices)
	}
	if s.FailureToFullNS > 0 {
		budget := s.FailureToFullBudgetNS
		if budget == 0 {
			budget = s.OwnerDeathBudgetNS
		}
		f := &failoverCell{Cause: s.FailureToFullCause, MeasuredNS: s.FailureToFullNS, BudgetNS: budget,
			Measured: admission.FormatSecondsShort(time.Duration(s.FailureToFullNS)),
			Budget:   admission.FormatSecondsShort(time.Duration(budget)), Within: s.FailureToFullNS <= budget}
		if budget > 0 {
			f.Share = fmt.Sprintf("%.0f %%", 100*float64(s.FailureToFullNS)/float64(budget))
		}
		row.Failover = f
	}
	return row
}

// timingDiff names the timings in which the row's owner differs from the
// file (or this node).
func timingDiff(own, row lease.RowTiming) string {
	var d []string
	add := func(name string, a, b time.Duration) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %s here, %s on the row", name, admission.FormatSeconds(a), admission.FormatSeconds(b)))
		}
	}
	add("lease_ttl", own.LeaseTTL, row.LeaseTTL)
	add("renew_interval", own.RenewInterval, row.RenewInterval)
	add("renew_call_timeout", own.RenewCallTimeout, row.RenewCallTimeout)
	add("acquire_poll_interval", own.AcquirePollInterval, row.AcquirePollInterval)
	add("fence_after", own.FenceAfter, row.FenceAfter)
	if len(d) == 0 {
		return "the row's owner runs another timing"
	}
	slices.Sort(d)
	return strings.Join(d, "; ")
}

func orAny(node string) string {
	if node == "" {
		return "any node"
	}
	return node
}
