package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
)

// exitStoreDown is the exit status of a fleet command whose lease store
// could not be read or written (docs/status-json.md).
const exitStoreDown = exitcode.StoreDown

// fleetCall bounds the store calls of one fleet command.
const fleetCall = 10 * time.Second

// fleetCmd is what every fleet command shares: the file, its admission
// reports and a connection to its lease store.
type fleetCmd struct {
	file    string
	cfg     *routes.Config
	reports []admission.Report
	store   fleetStore
}

// fleetStore is the lease store as the fleet commands use it: etcd or
// Kubernetes Leases.
type fleetStore interface {
	lease.Fleet
	Close() error
}

// openFleet loads file and connects to its lease store; it prints why not
// and returns the exit status when it cannot.
func openFleet(ctx context.Context, fl *flagSet, file string, stderr io.Writer) (*fleetCmd, int) {
	name := fl.cmd.name
	if file == "" {
		return nil, fl.usageError("-c FILE is required")
	}
	cfg, built, errs := load(file, false)
	if len(errs) > 0 {
		fmt.Fprintf(stderr, "%s: invalid configuration (%d problem(s)):\n", file, len(errs))
		for _, e := range errs {
			fmt.Fprintf(stderr, "  %v\n", e)
		}
		return nil, exitInvalid
	}
	if cfg.LeaseStore.Kubernetes != nil {
		store, err := openKubeStore(ctx, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			fmt.Fprintf(stderr, "leasebridge %s: lease store: %v\n", name, err)
			return nil, storeStatus(err)
		}
		return &fleetCmd{file: file, cfg: cfg, reports: built.Admit(), store: store}, exitOK
	}
	if len(cfg.StoreEndpoints()) == 0 {
		fmt.Fprintf(stderr, "leasebridge %s: %s sets no lease_store.endpoints or members: a standalone node's embedded store is private to its process\n", name, file)
		return nil, exitInvalid
	}
	where := strings.Join(redact.URLs(cfg.StoreEndpoints()), ", ")
	store, err := openStore(ctx, cfg, cfg.StoreEndpoints())
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge %s: lease store %s: %s\n", name, where, redact.Text(err.Error()))
		return nil, exitStoreDown
	}
	// Without authentication the client connects lazily, and the first
	// call would wait the whole fleetCall: one read within dial_timeout
	// says at once whether the store answers.
	dial := cfg.LeaseStore.DialTimeout.D()
	pctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	if _, err := store.Nodes(pctx); err != nil {
		store.Close()
		fmt.Fprintf(stderr, "leasebridge %s: lease store unreachable at %s within dial_timeout %s: %s\n", name, where, admission.FormatSeconds(dial), redact.Text(err.Error()))
		return nil, exitStoreDown
	}
	return &fleetCmd{file: file, cfg: cfg, reports: built.Admit(), store: store}, exitOK
}

// withFleet opens file's fleet and runs do on it, both within fleetCall;
// it returns openFleet's status when the fleet cannot be opened.
func withFleet(fl *flagSet, file string, stderr io.Writer, do func(context.Context, *fleetCmd) int) int {
	ctx, cancel := context.WithTimeout(context.Background(), fleetCall)
	defer cancel()
	fc, code := openFleet(ctx, fl, file, stderr)
	if fc == nil {
		return code
	}
	defer fc.store.Close()
	return do(ctx, fc)
}

// parsePositional parses flags and exactly one positional argument, first
// or last: `handover SESSION --to NODE -c FILE` and `handover -c FILE
// SESSION`.
func (f *flagSet) parsePositional(what string, args []string) (string, error) {
	var pos []string
	for len(args) > 0 {
		if !strings.HasPrefix(args[0], "-") {
			pos, args = append(pos, args[0]), args[1:]
			continue
		}
		flags := flagsOnly(args)
		if err := f.parse(flags); err != nil {
			return "", err
		}
		args = args[len(flags):]
	}
	if len(pos) != 1 {
		err := fmt.Errorf("want one %s, got %d", what, len(pos))
		f.usageError("%v", err)
		return "", err
	}
	return pos[0], nil
}

// flagsOnly is args up to the first argument that is neither a flag nor
// a flag's value.
func flagsOnly(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return args[:i]
		}
		if !strings.Contains(a, "=") && a != "-h" && a != "-help" && a != "--help" && a != "--json" && a != "-json" {
			i++ // the flag's value
		}
	}
	return args
}

// status is `leasebridge status -c FILE [--json]`: 0 every session of the
// file is owned, 1 one is not, 2 invalid usage, 3 store unreachable.
func status(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("status", stdout, stderr)
	file := fl.String("c", "", "configuration file")
	asJSON := fl.Bool("json", false, "print the fleet view as JSON (docs/status-json.md)")
	if err := fl.parse(args); err != nil {
		return flagStatus(err)
	}
	return withFleet(fl, *file, stderr, func(ctx context.Context, fc *fleetCmd) int { return printStatus(ctx, fc, *asJSON, stdout, stderr) })
}

// printStatus prints the fleet view of fc, as JSON or as tables.
func printStatus(ctx context.Context, fc *fleetCmd, asJSON bool, stdout, stderr io.Writer) int {
	st, err := fleetview.Read(ctx, fc.cfg, fc.reports, fc.store, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge status: %v\n", err)
		return exitStoreDown
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	} else {
		writeStatus(stdout, st)
	}
	if !st.AllOwned {
		return exitRefused
	}
	return exitOK
}

func secs(ns int64) string {
	return admission.FormatSecondsShort(time.Duration(ns))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeStatus prints the fleet view as two tables.
func writeStatus(w io.Writer, st fleetview.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATUS\tNODE\tEPOCH\tAGE\tLEASE_TTL\tSERVICE\tPINNED\tLIVE_ELIGIBLE\tNOTES")
	for _, s := range st.Sessions {
		age, ttl := "-", "-"
		if s.RowAgeNS != nil {
			age = secs(*s.RowAgeNS)
		}
		if s.Timing != nil {
			ttl = secs(int64(s.Timing.LeaseTTL))
		}
		pinned := "any"
		if s.Pinning.Nodes != nil {
			pinned = strings.Join(s.Pinning.Nodes, ",")
		}
		if s.Pinning.Preferred != "" {
			pinned += " (prefers " + s.Pinning.Preferred + ")"
		}
		var notes []string
		if s.TimingMismatch != nil {
			notes = append(notes, fmt.Sprintf("timing mismatch: row lease_ttl %s, file %s", secs(int64(s.TimingMismatch.Row.LeaseTTL)), secs(int64(s.TimingMismatch.File.LeaseTTL))))
		}
		if s.Owner != "" && !s.OwnerEligible {
			notes = append(notes, "owner not eligible in this file")
		}
		if s.Status != fleetview.Owned && len(s.LiveEligible) == 0 {
			notes = append(notes, "no live eligible node: runs nowhere")
		}
		if s.Handover != nil {
			notes = append(notes, "handover requested to "+orDash(s.Handover.To))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Session, s.Status, orDash(s.Node), s.Epoch, age, ttl, s.ServiceLevel,
			pinned, orDash(strings.Join(s.LiveEligible, ",")), orDash(strings.Join(notes, "; ")))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tLIVE\tAGE\tDRAINING\tOWNED\tSERVING\tSESSIONS")
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%v\t%d\t%d\t%d\n", n.Node, n.Live, secs(n.AgeNS), n.Draining, len(n.Owned), len(n.Serving), len(n.Sessions))
	}
	_ = tw.Flush()
	verdict := "every session is owned"
	if !st.AllOwned {
		verdict = "NOT every session is owned"
	}
	fmt.Fprintf(w, "\n%s (key_prefix %s)\n", verdict, st.KeyPrefix)
}

// handover is `leasebridge handover SESSION [--to NODE] -c FILE`: it
// writes a handover request into the store, prints the budget and waits
// for the row to change hands: 0 it did within the budget, 1 refused or
// not within the budget, 2 invalid usage, 3 store unreachable.
func handover(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("handover", stdout, stderr)
	file := fl.String("c", "", "configuration file")
	to := fl.String("to", "", "the node to hand over to (default: any other live eligible node)")
	session, err := fl.parsePositional("SESSION", args)
	if err != nil {
		return flagStatus(err)
	}
	return withFleet(fl, *file, stderr, func(ctx context.Context, fc *fleetCmd) int {
		return requestHandover(ctx, fc, session, *to, stdout, stderr)
	})
}

// requestHandover asks for the handover of session to (empty: anyone) and
// waits for it, as handover says.
func requestHandover(ctx context.Context, fc *fleetCmd, session, to string, stdout, stderr io.Writer) int {
	i := slices.IndexFunc(fc.reports, func(r admission.Report) bool { return r.Session == session })
	if i < 0 {
		fmt.Fprintf(stderr, "leasebridge handover: %s has no session %q\n", fc.file, session)
		return exitInvalid
	}
	rep := fc.reports[i]
	budget, err := admission.HandoverOf(rep)
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge handover: session %s: %v\n", session, err)
		return exitRefused
	}
	st, err := fleetview.Read(ctx, fc.cfg, fc.reports, fc.store, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge handover: %v\n", err)
		return exitStoreDown
	}
	fs := st.Sessions[slices.IndexFunc(st.Sessions, func(s fleetview.Session) bool { return s.Session == session })]
	if why := refuseHandover(fs, to); why != "" {
		fmt.Fprintf(stderr, "leasebridge handover: session %s: %s\n", session, why)
		return exitRefused
	}
	fmt.Fprintf(stdout, "handover of %s from %s (epoch %d) to %s\nhandover budget %s = %s\n", session, fs.Node, fs.Epoch, orDash(to),
		admission.FormatSeconds(budget.Total), formatTerms(budget))
	req := lease.HandoverRequest{Session: session, Epoch: fs.Epoch, Owner: fs.Owner, To: to, RequestedAt: time.Now().UnixNano()}
	start := time.Now()
	// The request lapses after twice the budget if nobody clears it.
	if err := fc.store.RequestHandover(ctx, req, 2*budget.Total); err != nil {
		fmt.Fprintf(stderr, "leasebridge handover: %v\n", err)
		return exitStoreDown
	}
	return waitHandover(fc, req, budget.Total, start, stdout, stderr)
}

// refuseHandover says why a handover to (empty: anyone) cannot be asked
// for, or "".
func refuseHandover(fs fleetview.Session, to string) string {
	switch {
	case fs.Status != fleetview.Owned:
		return fmt.Sprintf("it is %s: there is no owner to hand it over", fs.Status)
	case to == fs.Node:
		return fmt.Sprintf("node %s already owns it", to)
	case to != "" && !fs.Pinning.Eligible(to):
		return fmt.Sprintf("node %s is not eligible: nodes [%s]", to, strings.Join(fs.Pinning.Nodes, ", "))
	case to != "" && !slices.Contains(fs.LiveEligible, to):
		return fmt.Sprintf("node %s is not a live, undrained node running this session (live eligible: [%s])", to, strings.Join(fs.LiveEligible, ", "))
	case to == "" && !slices.ContainsFunc(fs.LiveEligible, func(n string) bool { return n != fs.Node }):
		return "no other live eligible node could take it"
	}
	return ""
}

func formatTerms(b admission.Budget) string {
	parts := make([]string, len(b.Terms))
	for i, t := range b.Terms {
		parts[i] = t.Name + " " + admission.FormatSeconds(t.Value)
	}
	return strings.Join(parts, " + ")
}

// waitHandover waits for the row to name another owner, at most the
// budget, and prints how long the store took to see it change hands.
func waitHandover(fc *fleetCmd, req lease.HandoverRequest, budget time.Duration, start time.Time, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	changes := fc.store.WatchRow(ctx, req.Session)
	for {
		rows, err := fc.store.Rows(ctx, []string{req.Session})
		if r := rows[req.Session].Row; err == nil && r.Owner != "" && r.Owner != req.Owner {
			fmt.Fprintf(stdout, "handed over: %s owns %s at epoch %d, %s after the request (the new owner activates next)\n",
				r.Node, req.Session, r.Epoch, admission.FormatSecondsShort(time.Since(start)))
			return exitOK
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "leasebridge handover: %s did not change hands within the handover budget %s\n", req.Session, admission.FormatSeconds(budget))
			return exitRefused
		case <-changes:
		}
	}
}

// drain is `leasebridge drain NODE -c FILE` and, with on false, undrain.
func drain(name string, on bool) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		fl := newFlags(name, stdout, stderr)
		file := fl.String("c", "", "configuration file")
		node, err := fl.parsePositional("NODE", args)
		if err != nil {
			return flagStatus(err)
		}
		return withFleet(fl, *file, stderr, func(ctx context.Context, fc *fleetCmd) int { return setDrain(ctx, fc, name, node, on, stdout, stderr) })
	}
}

// setDrain writes (on) or deletes the drain request of node.
func setDrain(ctx context.Context, fc *fleetCmd, name, node string, on bool, stdout, stderr io.Writer) int {
	if on {
		// A drain row for a name no node has written would stand for
		// nothing, or for a node started later: refuse it, write nothing.
		nodes, err := fc.store.Nodes(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "leasebridge %s: lease store: %v\n", name, err)
			return exitStoreDown
		}
		if _, ok := nodes[node]; !ok {
			known := slices.Sorted(maps.Keys(nodes))
			fmt.Fprintf(stderr, "leasebridge %s: no node %q in the lease store (nodes: %s); nothing written\n", name, node, strings.Join(known, ", "))
			return exitInvalid
		}
	}
	if err := fc.store.SetDrain(ctx, node, on); err != nil {
		fmt.Fprintf(stderr, "leasebridge %s: %v\n", name, err)
		return exitStoreDown
	}
	if on {
		fmt.Fprintf(stdout, "drain of %s requested: it stops competing and hands its sessions over one at a time, each within its handover budget; `leasebridge status` shows the progress\n", node)
	} else {
		fmt.Fprintf(stdout, "drain of %s lifted: it competes for its sessions again\n", node)
	}
	return exitOK
}
