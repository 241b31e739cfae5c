// Package fleetview reads the fleet as the lease store holds it: every
// session's row and every node row of one configuration file, judged on the
// reader's clock. It is what `leasebridge status` prints and GET /fleet
// serves; it only reads.
package fleetview

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
)

// Fleet session statuses (Session.Status).
const (
	// Owned: the row names an owner whose last write is younger than
	// its lease_ttl.
	Owned = "owned"
	// Unowned: the row is missing or released.
	Unowned = "unowned"
	// Stale: the row names an owner that has not renewed it for
	// longer than its lease_ttl: the owner is gone and no eligible node
	// has taken over (yet).
	Stale = "stale"
)

// Status is the fleet view of one configuration file: every session
// with its row and every node row (docs/status-json.md).
type Status struct {
	// KeyPrefix names the fleet.
	KeyPrefix string `json:"key_prefix"`
	// CheckedAt is the reader's wall clock, Unix nanoseconds.
	CheckedAt int64 `json:"checked_at_unix_ns"`
	// AllOwned is true when every session's status is owned.
	AllOwned bool `json:"all_owned"`
	// Sessions, by name.
	Sessions []Session `json:"sessions"`
	// Nodes, by name: every node row under key_prefix.
	Nodes []Node `json:"nodes"`
}

// Session is one session's row as the fleet view reads it.
type Session struct {
	Session string `json:"session"`
	// Status is owned, unowned or stale.
	Status string `json:"status"`
	// Owner and Node are the row's holder; empty when released.
	Owner string `json:"owner,omitempty"`
	Node  string `json:"node,omitempty"`
	// Epoch is the row's fencing token.
	Epoch uint64 `json:"epoch"`
	// RowVersion is the row's version in the store; 0: no row.
	RowVersion int64 `json:"row_version"`
	// RowAgeNS is the reader's wall clock minus the row's renewed_at;
	// absent for a row written without renewed_at.
	RowAgeNS *int64 `json:"row_age_ns,omitempty"`
	// Timing is the cadence the row's writer runs.
	Timing *lease.RowTiming `json:"timing,omitempty"`
	// ServiceLevel is full, activating (owned, not serving yet), unknown
	// (no fresh node row of the owner) or none (not owned).
	ServiceLevel string `json:"service_level"`
	// Pinning is the session's eligible and preferred nodes in the file.
	Pinning routes.Pinning `json:"pinning"`
	// LiveEligible are the live nodes that may run the session and run a
	// lease manager for it.
	LiveEligible []string `json:"live_eligible_nodes"`
	// OwnerEligible is false when the owner is not one of the file's
	// eligible nodes (another file pinned it differently).
	OwnerEligible bool `json:"owner_eligible"`
	// TimingMismatch is set when the row's timing differs from the file's.
	TimingMismatch *TimingMismatch `json:"timing_mismatch,omitempty"`
	// Handover is a standing handover request.
	Handover *lease.HandoverRequest `json:"handover,omitempty"`
	// HandoverBudgetNS is the file's admitted handover budget.
	HandoverBudgetNS int64 `json:"handover_budget_ns"`
}

// TimingMismatch compares the file's timing with the row's.
type TimingMismatch struct {
	File lease.RowTiming `json:"file"`
	Row  lease.RowTiming `json:"row"`
}

// Node is one node row.
type Node struct {
	lease.NodeRow
	// Live is true while the row is younger than its TTL on the reader's
	// wall clock and not marked stopped.
	Live bool `json:"live"`
	// AgeNS is the reader's wall clock minus renewed_at.
	AgeNS int64 `json:"age_ns"`
}

// Read reads every session of cfg and every node row from
// store and judges them at now. reports are cfg's admission reports.
func Read(ctx context.Context, cfg *routes.Config, reports []admission.Report, store lease.Fleet, now time.Time) (Status, error) {
	names := make([]string, 0, len(reports))
	for _, r := range reports {
		names = append(names, r.Session)
	}
	sort.Strings(names)
	rows, err := store.Rows(ctx, names)
	if err != nil {
		return Status{}, err
	}
	nodeRows, err := store.Nodes(ctx)
	if err != nil {
		return Status{}, err
	}
	ctl, err := store.Control(ctx)
	if err != nil {
		return Status{}, err
	}
	if err := readClaimed(ctx, store, nodeRows, rows); err != nil {
		return Status{}, err
	}
	st := Status{KeyPrefix: cfg.LeaseStore.KeyPrefix, CheckedAt: now.UnixNano(), AllOwned: true}
	nodes := map[string]Node{}
	for _, name := range sortedNames(nodeRows) {
		n := nodeRows[name]
		n.Owned, n.Serving = followRows(n, rows)
		n.Sessions = nonNil(n.Sessions)
		fn := Node{NodeRow: n, AgeNS: now.UnixNano() - n.RenewedAt}
		fn.Live = !n.Stopped && fn.AgeNS <= int64(n.TTL)
		nodes[name] = fn
		st.Nodes = append(st.Nodes, fn)
	}
	byName := map[string]admission.Report{}
	for _, r := range reports {
		byName[r.Session] = r
	}
	for _, name := range names {
		fs := readSession(cfg, byName[name], rows[name], nodes, now)
		if h, ok := ctl.Handovers[name]; ok {
			fs.Handover = &h
		}
		st.AllOwned = st.AllOwned && fs.Status == Owned
		st.Sessions = append(st.Sessions, fs)
	}
	return st, nil
}

func readSession(cfg *routes.Config, rep admission.Report, vr lease.VersionedRow, nodes map[string]Node, now time.Time) Session {
	row := vr.Row
	fs := Session{Session: rep.Session, Owner: row.Owner, Node: row.Node, Epoch: row.Epoch, RowVersion: vr.Version,
		Pinning: cfg.Pinning(rep.Session), ServiceLevel: "none", LiveEligible: []string{}}
	if b, err := admission.HandoverOf(rep); err == nil {
		fs.HandoverBudgetNS = int64(b.Total)
	}
	if row.RenewedAt != 0 {
		age := now.UnixNano() - row.RenewedAt
		fs.RowAgeNS = &age
	}
	if row.Timing != (lease.RowTiming{}) {
		t := row.Timing
		fs.Timing = &t
		if own := lease.ConfigFromReport(rep).RowTiming(); row.Owner != "" && own != t {
			fs.TimingMismatch = &TimingMismatch{File: own, Row: t}
		}
	}
	for _, name := range sortedNames(nodes) {
		n := nodes[name]
		if n.Live && !n.Draining && fs.Pinning.Eligible(name) && slices.Contains(n.Sessions, rep.Session) {
			fs.LiveEligible = append(fs.LiveEligible, name)
		}
	}
	switch {
	case row.Owner == "":
		fs.Status = Unowned
	case fs.RowAgeNS != nil && *fs.RowAgeNS > int64(max(row.Timing.LeaseTTL, rep.Timing.LeaseTTL)):
		fs.Status = Stale
	default:
		fs.Status = Owned
	}
	if row.Owner == "" {
		return fs
	}
	fs.OwnerEligible = fs.Pinning.Eligible(row.Node)
	fs.ServiceLevel = "unknown"
	if n, ok := nodes[row.Node]; ok && n.Live && n.Owner == row.Owner && fs.Status == Owned {
		fs.ServiceLevel = "activating"
		if slices.Contains(n.Serving, rep.Session) {
			fs.ServiceLevel = "full"
		}
	}
	return fs
}

// readClaimed adds to rows the rows of sessions a node row claims that
// the file does not name, so every claim can be checked against its row.
func readClaimed(ctx context.Context, store lease.Fleet, nodes map[string]lease.NodeRow, rows map[string]lease.VersionedRow) error {
	var extra []string
	for _, n := range nodes {
		for _, s := range n.Owned {
			if _, ok := rows[s]; !ok && !slices.Contains(extra, s) {
				extra = append(extra, s)
			}
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	more, err := store.Rows(ctx, extra)
	for k, v := range more {
		rows[k] = v
	}
	return err
}

// followRows is what node n owns and serves by the session rows: a node
// row is rewritten only every heartbeat, and a killed or drained node's
// last one claims sessions another node has taken since. Owned are the
// sessions whose row names n's owner identity; Serving those of them the
// node row says serve.
func followRows(n lease.NodeRow, rows map[string]lease.VersionedRow) (owned, serving []string) {
	owned, serving = []string{}, []string{}
	for _, name := range sortedNames(rows) {
		if n.Owner == "" || rows[name].Row.Owner != n.Owner {
			continue
		}
		owned = append(owned, name)
		if slices.Contains(n.Serving, name) {
			serving = append(serving, name)
		}
	}
	return owned, serving
}

// nonNil makes an absent list print as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
