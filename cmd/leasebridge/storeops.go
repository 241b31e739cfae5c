package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/lease/fleetstore"
	"github.com/leasebridge/leasebridge/routes"
)

// storeCall bounds one store subcommand (a replace retries etcd's "wait
// until every member has been connected for 5 s" inside it).
const storeCall = 30 * time.Second

// storeOp is what the store subcommands share: the flags, the loaded file
// and a connection to its members.
type storeOp struct {
	fl     *flagSet
	cfg    *routes.Config
	ops    *fleetstore.Ops
	asJSON bool
	stdout io.Writer
	stderr io.Writer
}

// openStoreOp parses args (with one positional argument when what is not
// empty, and the flags extra defines), loads the file and connects to its
// members.
func openStoreOp(sub, what string, args []string, stdout, stderr io.Writer, extra ...func(*flagSet)) (*storeOp, string, int) {
	fl := newFlags("store", stdout, stderr)
	file := fl.String("c", "", "the configuration `FILE` (required)")
	for _, e := range extra {
		e(fl)
	}
	asJSON := fl.Bool("json", false, "print the result as JSON")
	var pos string
	var err error
	if what != "" {
		pos, err = fl.parsePositional(what, args)
	} else {
		err = fl.parse(args)
	}
	if err != nil {
		return nil, "", flagStatus(err)
	}
	if *file == "" {
		return nil, "", fl.usageError("-c FILE is required")
	}
	cfg := loadStore("store "+sub, *file, stderr)
	if cfg == nil {
		return nil, "", exitStoreInvalid
	}
	ops, code := dialStore("store "+sub, cfg, stderr)
	if ops == nil {
		return nil, "", code
	}
	return &storeOp{fl: fl, cfg: cfg, ops: ops, asJSON: *asJSON, stdout: stdout, stderr: stderr}, pos, exitStoreOK
}

// printJSON prints v indented.
func (s *storeOp) printJSON(v any) {
	enc := json.NewEncoder(s.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// fail prints a failure of a subcommand and returns its exit status: 3
// when no member answered, else code.
func (s *storeOp) fail(sub string, err error, code int) int {
	fmt.Fprintf(s.stderr, "leasebridge store %s: %s\n", sub, redact.Text(err.Error()))
	if errors.Is(err, context.DeadlineExceeded) {
		return exitStoreUnreachable
	}
	return code
}

// membersDoc is `store members --json`.
type membersDoc struct {
	Members []fleetstore.MemberHealth `json:"members"`
	// Healthy: every member reachable, no alarm, one leader.
	Healthy bool `json:"healthy"`
	// Warnings are the file's store warnings (an even member count).
	Warnings []string `json:"warnings"`
}

// storeMembers is `leasebridge store members -c FILE [--json]`.
func storeMembers(args []string, stdout, stderr io.Writer) int {
	s, _, code := openStoreOp("members", "", args, stdout, stderr)
	if s == nil {
		return code
	}
	defer s.ops.Close()
	ctx, cancel := context.WithTimeout(context.Background(), storeCall)
	defer cancel()
	ms, err := s.ops.Members(ctx)
	if err != nil {
		return s.fail("members", err, exitStoreUnreachable)
	}
	doc := membersDoc{Members: ms, Healthy: true, Warnings: []string{}}
	leaders := 0
	for _, m := range ms {
		doc.Healthy = doc.Healthy && m.Reachable && len(m.Alarms) == 0
		if m.Leader {
			leaders++
		}
	}
	doc.Healthy = doc.Healthy && leaders == 1
	for _, w := range s.cfg.StoreWarnings() {
		doc.Warnings = append(doc.Warnings, w.Error())
	}
	if s.asJSON {
		s.printJSON(doc)
	} else {
		writeMembers(stdout, doc)
	}
	if !doc.Healthy {
		return exitStoreFailed
	}
	return exitStoreOK
}

func writeMembers(w io.Writer, doc membersDoc) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tREACHABLE\tLEADER\tRAFT_TERM\tRAFT_INDEX\tDB_SIZE\tALARMS\tPEER_URL\tNOTE")
	for _, m := range doc.Members {
		name := orDash(m.Name)
		if !m.Started {
			name += " (not started)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\t%d\t%d\t%s\t%s\t%s\n", name, m.ID, m.Reachable, m.Leader, m.RaftTerm, m.RaftIndex,
			m.DBSize, orDash(strings.Join(m.Alarms, ",")), strings.Join(m.PeerURLs, ","), orDash(m.Error))
	}
	_ = tw.Flush()
	for _, warn := range doc.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if doc.Healthy {
		fmt.Fprintln(w, "every member is reachable, without alarms, with one leader")
	} else {
		fmt.Fprintln(w, "NOT HEALTHY: a member is unreachable, raised an alarm, or there is no single leader")
	}
}

// storeReplace is `leasebridge store replace NAME -c FILE [--json]`.
func storeReplace(args []string, stdout, stderr io.Writer) int {
	s, name, code := openStoreOp("replace", "member NAME", args, stdout, stderr)
	if s == nil {
		return code
	}
	defer s.ops.Close()
	m, i := s.cfg.Member(name)
	if i < 0 {
		return s.fl.usageError("%q is not one of lease_store.members in %s", name, s.cfg.File)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCall)
	defer cancel()
	fmt.Fprintf(stderr, "replacing member %s (%s): remove, then add it empty...\n", name, m.PeerURL)
	r, err := s.ops.Replace(ctx, name, m.PeerURL)
	if err != nil {
		return s.fail("replace", err, exitStoreFailed)
	}
	if s.asJSON {
		s.printJSON(r)
		return exitStoreOK
	}
	removed := "it was already removed"
	if r.RemovedID != "" {
		removed = "removed " + r.RemovedID
	}
	fmt.Fprintf(stdout, "member %s replaced: %s, added %s at %s (not started).\nnext, on %s's node:\n"+
		"  1. make sure its store process is stopped;\n"+
		"  2. move its data directory away (data_dir/store of its file, and data_dir/store.lock);\n"+
		"  3. start it: leasebridge store -c FILE. It joins empty and catches up from the leader;\n"+
		"     `leasebridge store members -c FILE` shows it reachable when it has.\n",
		name, removed, r.AddedID, m.PeerURL, name)
	return exitStoreOK
}

// storeSnapshot is `leasebridge store snapshot OUT -c FILE [--json]`.
func storeSnapshot(args []string, stdout, stderr io.Writer) int {
	s, out, code := openStoreOp("snapshot", "snapshot FILE", args, stdout, stderr)
	if s == nil {
		return code
	}
	defer s.ops.Close()
	ctx, cancel := context.WithTimeout(context.Background(), storeCall)
	defer cancel()
	snap, err := s.ops.TakeSnapshot(ctx, s.cfg.LeaseStore.KeyPrefix, time.Now())
	if err != nil {
		return s.fail("snapshot", err, exitStoreUnreachable)
	}
	if err := writeFileAtomic(out, func(w io.Writer) error { return fleetstore.WriteSnapshot(w, snap) }); err != nil {
		return s.fail("snapshot", err, exitStoreFailed)
	}
	if s.asJSON {
		s.printJSON(map[string]any{"file": out, "rows": len(snap.Rows), "revision": snap.Revision, "taken_at": snap.TakenAt})
		return exitStoreOK
	}
	fmt.Fprintf(stdout, "%s: %d session row(s) at revision %d, taken %s\n", out, len(snap.Rows), snap.Revision, snap.TakenAt.Format(time.RFC3339))
	return exitStoreOK
}

// writeFileAtomic writes path through a temporary file in its directory.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// storeRestore is `leasebridge store restore SNAPSHOT -c FILE [--json]`.
func storeRestore(args []string, stdout, stderr io.Writer) int {
	s, in, code := openStoreOp("restore", "snapshot FILE", args, stdout, stderr)
	if s == nil {
		return code
	}
	defer s.ops.Close()
	f, err := os.Open(in)
	if err != nil {
		return s.fail("restore", err, exitStoreInvalid)
	}
	snap, err := fleetstore.ReadSnapshot(f)
	f.Close()
	if err != nil {
		return s.fail("restore", fmt.Errorf("%s: %w", in, err), exitStoreInvalid)
	}
	if p := s.cfg.LeaseStore.KeyPrefix; snap.KeyPrefix != p {
		return s.fail("restore", fmt.Errorf("%s was taken under key_prefix %q, this file's is %q", in, snap.KeyPrefix, p), exitStoreInvalid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCall)
	defer cancel()
	fmt.Fprintf(stderr, "restoring %d session row(s) taken %s: every row released, every epoch raised...\n", len(snap.Rows), snap.TakenAt.Format(time.RFC3339))
	r, err := s.ops.Restore(ctx, snap.KeyPrefix, snap, time.Now())
	if err != nil {
		return s.fail("restore", err, exitStoreUnreachable)
	}
	if s.asJSON {
		s.printJSON(r)
		return exitStoreOK
	}
	fmt.Fprintf(stdout, "restored %d session row(s), each released with its epoch raised by %d above the snapshot's and the store's (highest now %d)\n",
		r.Rows, r.Raise, r.MaxEpoch)
	return exitStoreOK
}

// names is a repeatable string flag.
type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

// storeRoles is `leasebridge store roles -c FILE [--bridge NAME]...
// [--reader NAME]... [--json]`.
func storeRoles(args []string, stdout, stderr io.Writer) int {
	var bridges, readers names
	s, _, code := openStoreOp("roles", "", args, stdout, stderr, func(fl *flagSet) {
		fl.Var(&bridges, "bridge", "a bridge's certificate `NAME` outside the members (repeatable)")
		fl.Var(&readers, "reader", "a read-only client's certificate `NAME`, for status (repeatable)")
	})
	if s == nil {
		return code
	}
	defer s.ops.Close()
	// A member's certificate is also its gateway's bridge's.
	all := append(append(names{}, bridges...), s.cfg.MemberNames()...)
	ctx, cancel := context.WithTimeout(context.Background(), storeCall)
	defer cancel()
	r, err := s.ops.EnsureRoles(ctx, s.cfg.LeaseStore.KeyPrefix, all, readers)
	if err != nil {
		return s.fail("roles", err, exitStoreFailed)
	}
	if s.asJSON {
		s.printJSON(r)
		return exitStoreOK
	}
	fmt.Fprintf(stdout, "authentication is on: certificate names %s read and write %s and the endpoint claims (role %s); %s only read them (role %s); "+
		"any other name can do neither. Members and roles now change only with a certificate named %s.\n",
		strings.Join(r.Bridges, ", "), r.KeyPrefix, fleetstore.BridgeRole, orDash(strings.Join(r.Readers, ", ")), fleetstore.ReaderRole, fleetstore.RootUser)
	return exitStoreOK
}
