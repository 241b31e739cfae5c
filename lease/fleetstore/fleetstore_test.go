package fleetstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
)

// cluster is n in-process members on loopback, each with its own data
// directory.
type cluster struct {
	t       *testing.T
	members []Member
	dirs    map[string]string
	tls     map[string]*TLSFiles
	servers map[string]*Server
	mu      sync.Mutex
}

func newCluster(t *testing.T, n int, ca *testetcd.CA) *cluster {
	scheme := "http"
	if ca != nil {
		scheme = "https"
	}
	c := &cluster{t: t, dirs: map[string]string{}, tls: map[string]*TLSFiles{}, servers: map[string]*Server{}}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		c.members = append(c.members, Member{Name: name, PeerURL: scheme + "://" + testbin.FreeAddr(t), ClientURL: scheme + "://" + testbin.FreeAddr(t)})
		c.dirs[name] = filepath.Join(t.TempDir(), "store")
		if ca != nil {
			f := ca.Issue(name)
			c.tls[name] = &TLSFiles{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}
		}
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.servers {
			s.Close()
		}
	})
	return c
}

func (c *cluster) options(name string) Options {
	return Options{Name: name, Members: c.members, Dir: c.dirs[name], Heartbeat: 10 * time.Millisecond,
		Election: 100 * time.Millisecond, TLS: c.tls[name], Probe: time.Second}
}

func (c *cluster) start(ctx context.Context, o Options) error {
	s, err := Start(ctx, o)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.servers[o.Name] = s
	c.mu.Unlock()
	return nil
}

// startAll starts every member at once, as a fleet's first boot does.
func (c *cluster) startAll() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, len(c.members))
	for _, m := range c.members {
		go func() { errs <- c.start(ctx, c.options(m.Name)) }()
	}
	for range c.members {
		if err := <-errs; err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *cluster) stop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers[name].Close()
	delete(c.servers, name)
}

func (c *cluster) ops(files *TLSFiles) *Ops {
	c.t.Helper()
	tc, err := ClientTLS(files)
	if err != nil {
		c.t.Fatal(err)
	}
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.ClientURL)
	}
	o, err := Dial(eps, tc)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { o.Close() })
	return o
}

// A restarted member rejoins with its data; a wiped one is refused with
// the replace command named, rejoins after a replace, and a directory of
// another member is refused.
func TestWipedMemberReplacedAndForeignDirRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ops := c.ops(nil)
	if _, err := ops.Client().Put(ctx, "/p/s1", `{"owner":"x","node":"m0","epoch":3}`); err != nil {
		t.Fatal(err)
	}
	c.stop("m2")
	if err := c.start(ctx, c.options("m2")); err != nil {
		t.Fatalf("restart with data: %v", err)
	}
	c.stop("m2")
	if err := os.RemoveAll(c.dirs["m2"]); err != nil {
		t.Fatal(err)
	}
	err := c.start(ctx, c.options("m2"))
	if !errors.Is(err, ErrWiped) || !strings.Contains(err.Error(), "leasebridge store replace m2") {
		t.Fatalf("wiped member: %v, want ErrWiped naming the replace command", err)
	}
	if _, err := os.Stat(c.dirs["m2"]); !os.IsNotExist(err) {
		t.Fatalf("refused start wrote its data directory: %v", err)
	}
	if _, err := ops.Replace(ctx, "m0", c.members[0].PeerURL); !errors.Is(err, ErrRunning) {
		t.Fatalf("replace of a running member: %v, want ErrRunning", err)
	}
	r, err := ops.Replace(ctx, "m2", c.members[2].PeerURL)
	if err != nil || r.RemovedID == "" || r.AddedID == "" {
		t.Fatalf("replace: %+v %v", r, err)
	}
	o := c.options("m2")
	if err := c.start(ctx, o); err != nil {
		t.Fatalf("start after replace: %v", err)
	}
	if !c.servers["m2"].Joined {
		t.Fatal("the replaced member did not join")
	}
	waitMember(t, ops, func(h MemberHealth) bool { return h.Name == "m2" && h.Reachable && h.ID == r.AddedID })
	// m1's directory given to m0 is another member's.
	c.stop("m1")
	o = c.options("m0")
	o.Dir = c.dirs["m1"]
	if err := c.start(ctx, o); !errors.Is(err, ErrForeignDir) || !strings.Contains(err.Error(), `belongs to member "m1"`) {
		t.Fatalf("foreign dir: %v", err)
	}
}

// waitMember waits until a member is as ok wants.
func waitMember(t *testing.T, ops *Ops, ok func(MemberHealth) bool) {
	t.Helper()
	testbin.Observe(t, 30*time.Second, func() (bool, string) {
		ms, err := ops.Members(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for _, h := range ms {
			if ok(h) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ms)
	})
}

// A member whose configured list differs from the running cluster's is
// refused naming both lists, with nothing written.
func TestMismatchedMemberListRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.stop("m2")
	o := c.options("m2")
	o.Members = append([]Member{}, c.members...)
	o.Members[1].PeerURL = "http://" + testbin.FreeAddr(t)
	o.Dir = filepath.Join(t.TempDir(), "fresh")
	err := c.start(ctx, o)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "m1="+o.Members[1].PeerURL) || !strings.Contains(err.Error(), "m1="+c.members[1].PeerURL) {
		t.Fatalf("mismatch: %v, want ErrMismatch naming both lists", err)
	}
	if _, err := os.Stat(o.Dir); !os.IsNotExist(err) {
		t.Fatalf("refused start wrote %s", o.Dir)
	}
	// With its data, against the recorded list: refused too.
	o.Dir = c.dirs["m2"]
	if err := c.start(ctx, o); !errors.Is(err, ErrMismatch) {
		t.Fatalf("mismatch with data: %v", err)
	}
	// Data of an earlier cluster (as if rebuilt while m2 was away).
	id, _, err := readIdentity(c.dirs["m2"])
	if err != nil || id.ClusterID == "" {
		t.Fatalf("identity %+v %v", id, err)
	}
	running := id.ClusterID
	id.ClusterID = "1234abcd"
	if err := writeIdentity(c.dirs["m2"], id); err != nil {
		t.Fatal(err)
	}
	err = c.start(ctx, c.options("m2"))
	if !errors.Is(err, ErrForeignDir) || !strings.Contains(err.Error(), "cluster 1234abcd, but cluster "+running+" runs") {
		t.Fatalf("earlier cluster's data: %v", err)
	}
}

// A client whose certificate comes from another CA can neither read nor
// write; one from the fleet CA can.
func TestCertificateFromAnotherCARefused(t *testing.T) {
	ca := testetcd.NewCA(t, "fleet")
	c := newCluster(t, 3, ca)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.ops(files(ca.Issue("bridge"))).Client().Put(ctx, "/p/s", "{}"); err != nil {
		t.Fatalf("fleet CA client: %v", err)
	}
	other := files(testetcd.NewCA(t, "other").Issue("intruder"))
	other.CAFile = ca.File // it trusts the members, they do not trust it
	octx, ocancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer ocancel()
	intruder := c.ops(other).Client()
	if _, err := intruder.Get(octx, "/p/s"); err == nil {
		t.Fatal("a client certificate from another CA read a row")
	}
	if _, err := intruder.Put(octx, "/p/s", "{}"); err == nil {
		t.Fatal("a client certificate from another CA wrote a row")
	}
}

// A restore releases every row with an epoch above every epoch stamped
// before it: rows that moved on after the snapshot, rows the snapshot
// never saw, and onto a cluster rebuilt empty.
func TestRestoreNeverHandsOutAStampedEpoch(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ops := c.ops(nil)
	put := func(o *Ops, session string, epoch uint64) {
		t.Helper()
		if _, err := o.Client().Put(ctx, "/p/"+session, fmt.Sprintf(`{"owner":"x#1","node":"x","epoch":%d}`, epoch)); err != nil {
			t.Fatal(err)
		}
	}
	put(ops, "s1", 5)
	put(ops, "s2", 40)
	if _, err := ops.Client().Put(ctx, "/p/_nodes/x", `{}`); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	snap, err := ops.TakeSnapshot(ctx, "/p/", taken)
	if err != nil || len(snap.Rows) != 2 {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	var file strings.Builder
	if err := WriteSnapshot(&file, snap); err != nil {
		t.Fatal(err)
	}
	snap, err = ReadSnapshot(strings.NewReader(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	// Stamped after the snapshot: s1 moved to 7, s3 is new at 2.
	put(ops, "s1", 7)
	put(ops, "s3", 2)
	stamped := map[string]uint64{"s1": 7, "s2": 40, "s3": 2}
	later := taken.Add(2000 * time.Second)
	res, err := ops.Restore(ctx, "/p/", snap, later)
	if err != nil || res.Rows != 3 || res.Raise != 2000*EpochRatePerSecond {
		t.Fatalf("restore: %+v %v", res, err)
	}
	checkRestored(t, ops, stamped, res.Raise)

	// Quorum lost and the store rebuilt empty: the snapshot alone keeps
	// the epochs above what it saw, and the raise above what came after.
	fresh := newCluster(t, 1, nil)
	fresh.startAll()
	fops := fresh.ops(nil)
	res, err = fops.Restore(ctx, "/p/", snap, taken.Add(time.Second))
	if err != nil || res.Rows != 2 || res.Raise != MinEpochRaise {
		t.Fatalf("restore onto an empty store: %+v %v", res, err)
	}
	checkRestored(t, fops, map[string]uint64{"s1": 5, "s2": 40}, MinEpochRaise)
}

// checkRestored checks every row is released at least raise above the
// epoch stamped on it.
func checkRestored(t *testing.T, ops *Ops, stamped map[string]uint64, raise uint64) {
	t.Helper()
	snap, err := ops.TakeSnapshot(context.Background(), "/p/", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for s, e := range stamped {
		row, ok := snap.Rows[s]
		if !ok || row.Owner != "" || row.Node != "" || row.Epoch < e+raise {
			t.Errorf("%s: %+v (present %v), want released with epoch >= %d", s, row, ok, e+raise)
		}
	}
}

func TestEpochRaise(t *testing.T) {
	for age, want := range map[time.Duration]uint64{-time.Hour: MinEpochRaise, 0: MinEpochRaise, time.Second: MinEpochRaise,
		1001 * time.Second: 1001 * EpochRatePerSecond, 1000*time.Second + 1: 1001 * EpochRatePerSecond} {
		if got := EpochRaise(age); got != want {
			t.Errorf("EpochRaise(%s) = %d, want %d", age, got, want)
		}
	}
}

func files(f testetcd.TLSFiles) *TLSFiles {
	return &TLSFiles{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}
}

// A member late to the first start (the others already have a quorum)
// joins with its empty directory: it is not a wiped member.
func TestLateFirstStartJoins(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	for _, n := range []string{"m0", "m1"} {
		go func() { errs <- c.start(ctx, c.options(n)) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.start(ctx, c.options("m2")); err != nil {
		t.Fatalf("late first start: %v", err)
	}
	if !c.servers["m2"].Joined {
		t.Error("the late member bootstrapped instead of joining")
	}
	waitMember(t, c.ops(nil), func(h MemberHealth) bool { return h.Name == "m2" && h.Reachable })
}

// A member whose certificate comes from another CA never joins: the
// members refuse its peer connections, so it never starts.
func TestMemberFromAnotherCANeverJoins(t *testing.T) {
	ca := testetcd.NewCA(t, "fleet")
	c := newCluster(t, 3, ca)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	for _, n := range []string{"m0", "m1"} {
		go func() { errs <- c.start(ctx, c.options(n)) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	intruder := files(testetcd.NewCA(t, "other").Issue("m2"))
	intruder.CAFile = ca.File // it trusts the members; they do not trust it
	o := c.options("m2")
	o.TLS = intruder
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := c.start(sctx, o); !errors.Is(err, ErrStopped) {
		t.Fatalf("member from another CA: %v, want it never ready (ErrStopped)", err)
	}
	ms, err := c.ops(files(ca.Issue("tool"))).Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "m2" && m.Started {
			t.Fatalf("the member from another CA started: %+v", m)
		}
	}
}

// With roles on, a bridge's certificate name reads and writes the rows, a
// reader's only reads them, and a certificate of the fleet CA with any
// other name can do neither; none writes outside the prefix.
func TestRolesSeparateBridgesAndReaders(t *testing.T) {
	ca := testetcd.NewCA(t, "fleet")
	c := newCluster(t, 3, ca)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := c.ops(files(ca.Issue(RootUser)))
	r, err := root.EnsureRoles(ctx, "/p/", []string{"m0", "m1", "m2", "gw-9"}, []string{"monitor"})
	if err != nil || !r.AuthEnabled {
		t.Fatalf("roles: %+v %v", r, err)
	}
	if _, err := root.EnsureRoles(ctx, "/p/", []string{"m0"}, nil); err != nil {
		t.Fatalf("roles again, as root: %v", err)
	}
	bridge := c.ops(files(ca.Issue("gw-9"))).Client()
	if _, err := bridge.Put(ctx, "/p/s1", "{}"); err != nil {
		t.Fatalf("bridge write: %v", err)
	}
	if _, err := bridge.Put(ctx, "/elsewhere", "x"); err == nil {
		t.Error("a bridge wrote outside the key prefix")
	}
	reader := c.ops(files(ca.Issue("monitor"))).Client()
	if resp, err := reader.Get(ctx, "/p/s1"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reader read: %v", err)
	}
	if _, err := reader.Put(ctx, "/p/s1", "{}"); err == nil {
		t.Error("a reader wrote a row")
	}
	stranger := c.ops(files(ca.Issue("stranger"))).Client()
	if _, err := stranger.Get(ctx, "/p/s1"); err == nil {
		t.Error("a certificate name without a role read a row")
	}
	if _, err := c.ops(files(ca.Issue("gw-9"))).EnsureRoles(ctx, "/p/", []string{"x"}, nil); err == nil {
		t.Error("a bridge changed the roles")
	}
	if ms, err := c.ops(files(ca.Issue("monitor"))).Members(ctx); err != nil || len(ms) != 3 || !ms[0].Reachable {
		t.Errorf("members with authentication on: %+v %v", ms, err)
	}
}

// A member named by IP listens on it; one named by DNS on every address.
func TestListenURLs(t *testing.T) {
	for adv, want := range map[string]string{"https://10.0.0.1:2380": "https://10.0.0.1:2380", "https://localhost:2380": "https://localhost:2380",
		"https://etcd-0.etcd:2380": "https://0.0.0.0:2380", "https://[::1]:2379": "https://[::1]:2379"} {
		u, err := urls(adv)
		if err != nil {
			t.Fatal(err)
		}
		if got := listenURLs(u)[0]; got.String() != want {
			t.Errorf("%s: listens on %s, want %s", adv, got.String(), want)
		}
	}
}

// A cluster rebuilt after a quorum loss with a new token has a new
// cluster id, so a member still holding the old cluster's data is refused.
func TestRebuiltClusterRefusesOldData(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []string{"m0", "m1", "m2"} {
		c.stop(n)
	}
	errs := make(chan error, 2)
	for _, n := range []string{"m0", "m1"} {
		if err := os.RemoveAll(c.dirs[n]); err != nil {
			t.Fatal(err)
		}
		o := c.options(n)
		o.ClusterToken = "rebuild-1"
		go func() { errs <- c.start(ctx, o) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	err := c.start(ctx, c.options("m2"))
	if !errors.Is(err, ErrForeignDir) || !strings.Contains(err.Error(), "store replace m2") {
		t.Fatalf("old cluster's member: %v, want ErrForeignDir", err)
	}
}
