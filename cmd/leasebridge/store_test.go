package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/lease/etcdstore"
	"github.com/leasebridge/leasebridge/lease/fleetstore"
)

// fleet is a fleet on loopback whose lease store is its own members,
// each `leasebridge store` process beside (or instead of) a bridge.
type fleet struct {
	t       *testing.T
	dir     string
	names   []string
	members string // the lease_store.members block
	ca      *testetcd.CA
	broker  *embedbroker.Broker
	plc     *plcsim.PLC
	stores  map[string]*storeProc
}

// storeProc is one `leasebridge store` process.
type storeProc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	exit      int
}

// newFleet lays out members names on free loopback ports, with TLS from a
// fresh fleet CA when tls is set, and starts the broker and the PLC.
func newFleet(t *testing.T, tls bool, names ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir(), names: names, stores: map[string]*storeProc{}}
	scheme := "http"
	if tls {
		scheme, f.ca = "https", testetcd.NewCA(t, "fleet")
	}
	for _, n := range names {
		f.members += fmt.Sprintf("    - {name: %s, peer_url: \"%s://%s\", client_url: \"%s://%s\"}\n", n, scheme, testbin.FreeAddr(t), scheme, testbin.FreeAddr(t))
	}
	f.broker, f.plc = testbin.StartBroker(t), testbin.StartPLC(t, 20*time.Millisecond)
	return f
}

// storeBlock is node's data_dir and lease_store block with members.
func (f *fleet) storeBlock(node, members string) string {
	sec := "  plaintext: true\n"
	if f.ca != nil {
		c := f.ca.Issue(node)
		sec = fmt.Sprintf("  member_tls: {ca_file: %s, cert_file: %s, key_file: %s}\n", c.CAFile, c.CertFile, c.KeyFile)
	}
	return fmt.Sprintf("data_dir: %s\nlease_store:\n  key_prefix: /fleet-test/\n  heartbeat_interval: 50ms\n  election_timeout: 500ms\n%s  members:\n%s",
		filepath.Join(f.dir, node), sec, members)
}

// bridgeFile is the configuration of node's bridge and member.
func (f *fleet) bridgeFile(node, httpAddr string) string {
	y := testbin.Config(testbin.Bridge{Etcd: "X", Broker: f.broker.URL, PLC: f.plc.Addr(), Node: node, HTTP: httpAddr,
		KeyPrefix: "/fleet-test/", Topic: "{device}/{tag}"})
	old := "lease_store: {endpoints: [X], key_prefix: /fleet-test/}\n"
	if !strings.Contains(y, old) {
		f.t.Fatalf("testbin.Config changed: no %q", old)
	}
	return strings.Replace(y, old, f.storeBlock(node, f.members), 1)
}

// clientFile is node's configuration with a client certificate named
// name (root for the store's administration, a reader's, a stranger's).
func (f *fleet) clientFile(node, name string) string {
	c := f.ca.Issue(name)
	y := strings.Replace(f.bridgeFile(node, testbin.FreeAddr(f.t)), "lease_store:\n",
		fmt.Sprintf("lease_store:\n  tls: {ca_file: %s, cert_file: %s, key_file: %s}\n", c.CAFile, c.CertFile, c.KeyFile), 1)
	return f.write(node+"-"+name, y)
}

// witnessFile is a witness's configuration: members and no routes.
func (f *fleet) witnessFile(node, members string) string {
	return "deployment_mode: clustered\nnode: " + node + "\n" + f.storeBlock(node, members)
}

func (f *fleet) write(name, y string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name+".yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// startStore runs `leasebridge store -c file` for node.
func (f *fleet) startStore(node, file string) *storeProc {
	t := f.t
	t.Helper()
	sp := &storeProc{name: node, log: filepath.Join(f.dir, fmt.Sprintf("%s-store-%d.log", node, time.Now().UnixNano())), done: make(chan struct{}), exit: -1}
	logf, err := os.Create(sp.log)
	if err != nil {
		t.Fatal(err)
	}
	sp.cmd = exec.Command(testbin.Leasebridge(t), "store", "-c", file, "--log-format", "text")
	sp.cmd.Stdout, sp.cmd.Stderr = logf, logf
	if err := sp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := sp.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			sp.exit = 0
		case errors.As(err, &ee):
			sp.exit = ee.ExitCode()
		}
		logf.Close()
		close(sp.done)
	}()
	t.Cleanup(func() {
		_ = sp.cmd.Process.Kill()
		<-sp.done
		if t.Failed() {
			b, _ := os.ReadFile(sp.log)
			t.Logf("%s store log:\n%s", node, b)
		}
	})
	f.stores[node] = sp
	return sp
}

// wait waits for the process to exit and returns its status and log.
func (sp *storeProc) wait(t *testing.T, limit time.Duration) (int, string) {
	t.Helper()
	select {
	case <-sp.done:
	case <-time.After(limit):
		t.Fatalf("store %s did not exit within %s", sp.name, limit)
	}
	b, _ := os.ReadFile(sp.log)
	return sp.exit, string(b)
}

// waitHealthy waits until `store members -c file` exits 0.
func (f *fleet) waitHealthy(file string) {
	f.t.Helper()
	testbin.Observe(f.t, 90*time.Second, func() (bool, string) {
		code, out, errs := runCmd(f.t, "store", "members", "-c", file)
		return code == exitStoreOK, fmt.Sprintf("exit %d\n%s%s", code, out, errs)
	})
}

// Three `store` processes form the fleet's store from their files alone;
// `store roles` turns authentication on; two `run` bridges use it with
// their members' certificates, and `status` reads it with a bridge's or a
// reader's certificate, not with another name's. Killing the owner's
// node (its bridge and its member, SIGKILL) hands the session to the
// other bridge within the admitted owner-death budget, with one PLC
// connection at a time.
func TestStoreProcessesFormClusterAndBridgesUseIt(t *testing.T) {
	f := newFleet(t, true, "m0", "m1", "m2")
	files, addrs := map[string]string{}, map[string]string{}
	for _, n := range f.names {
		addrs[n] = testbin.FreeAddr(t)
		files[n] = f.write(n, f.bridgeFile(n, addrs[n]))
		f.startStore(n, files[n])
	}
	f.waitHealthy(files["m2"])
	if code, out, errs := runCmd(t, "store", "roles", "-c", f.clientFile("m0", "root"), "--reader", "monitor"); code != exitStoreOK || !strings.Contains(out, "authentication is on") {
		t.Fatalf("store roles: exit %d\n%s%s", code, out, errs)
	}
	var procs []*bridgeProc
	byProc := map[*bridgeProc]*proc{}
	for _, n := range f.names[:2] {
		p := launch(t, f.dir, n, addrs[n], f.bridgeFile(n, addrs[n]))
		procs = append(procs, p.bridgeProc)
		byProc[p.bridgeProc] = p
	}
	budget := byProc[procs[0]].report.OwnerDeath.Total
	owner, _, err := waitOwner(context.Background(), procs, nil, budget)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		want int
	}{{files["m2"], exitOK}, {f.clientFile("m2", "monitor"), exitOK}, {f.clientFile("m2", "stranger"), exitStoreDown}} {
		if code, out, errs := runCmd(t, "status", "-c", c.file); code != c.want {
			t.Fatalf("status -c %s: exit %d, want %d\n%s%s", c.file, code, c.want, out, errs)
		}
	}
	killed := time.Now()
	_ = owner.cmd.Process.Kill()
	_ = f.stores[owner.name].cmd.Process.Kill()
	next, _, err := waitOwner(context.Background(), procs, owner, budget)
	if err != nil {
		t.Fatalf("after killing node %s (bridge and member): %v", owner.name, err)
	}
	took := time.Since(killed)
	if peak := f.plc.Proxy().Peak(); peak != 1 {
		t.Errorf("PLC saw %d concurrent connections", peak)
	}
	t.Logf("node %s killed (bridge and member); %s serving after %s, budget %s", owner.name, next.name, took, budget)
}

// Two gateways and a witness: run refuses the witness's file; a member
// whose list differs is refused naming both lists; a wiped member is
// refused naming the replace command, is replaced and rejoins; a restore
// raises the epoch of a row stamped after the snapshot.
func TestStoreReplaceMismatchWitnessAndRestore(t *testing.T) {
	f := newFleet(t, false, "gw0", "gw1", "w")
	gw0 := f.write("gw0", f.bridgeFile("gw0", testbin.FreeAddr(t)))
	f.write("gw1", f.bridgeFile("gw1", testbin.FreeAddr(t)))
	witness := f.write("w", f.witnessFile("w", f.members))
	if code, _, errs := runCmd(t, "run", "-c", witness); code != exitInvalid || !strings.Contains(errs, "witness") {
		t.Fatalf("run on a witness's file: exit %d %s", code, errs)
	}
	if code, out, errs := runCmd(t, "admit", "-c", witness); code != exitOK || !strings.Contains(out, "a witness's file") {
		t.Fatalf("admit on a witness's file: exit %d\n%s%s", code, out, errs)
	}
	for _, n := range f.names {
		f.startStore(n, filepath.Join(f.dir, n+".yaml"))
	}
	f.waitHealthy(gw0)

	// The witness, stopped, starts with another member list: refused.
	sp := f.stores["w"]
	_ = sp.cmd.Process.Signal(syscall.SIGTERM)
	if code, log := sp.wait(t, 30*time.Second); code != exitStoreOK {
		t.Fatalf("SIGTERM: exit %d\n%s", code, log)
	}
	// Two of three answer: the store serves, and members says who is not.
	code, out, errs := runCmd(t, "store", "members", "-c", gw0, "--json")
	var doc membersDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitStoreFailed || doc.Healthy {
		t.Fatalf("members with the witness down: exit %d %v\n%s%s", code, err, out, errs)
	}
	for _, m := range doc.Members {
		if (m.Name == "w") == m.Reachable {
			t.Errorf("member %s reachable %v", m.Name, m.Reachable)
		}
	}
	gw1Peer := strings.Split(strings.Split(f.members, "\n")[1], "\"")[1]
	other := strings.Replace(f.members, gw1Peer, "http://"+testbin.FreeAddr(t), 1)
	code, log := f.startStore("w", f.write("w-other", f.witnessFile("w", other))).wait(t, 60*time.Second)
	if code != exitStoreInvalid || !strings.Contains(log, "gw1="+gw1Peer) || !strings.Contains(log, "differ from the members") {
		t.Fatalf("mismatched list: exit %d, want %d naming both lists\n%s", code, exitStoreInvalid, log)
	}
	// Wiped: refused with the way back named.
	if err := os.RemoveAll(filepath.Join(f.dir, "w", "store")); err != nil {
		t.Fatal(err)
	}
	code, log = f.startStore("w", witness).wait(t, 60*time.Second)
	if code != exitStoreInvalid || !strings.Contains(log, "leasebridge store replace w") {
		t.Fatalf("wiped member: exit %d\n%s", code, log)
	}
	code, out, errs = runCmd(t, "store", "replace", "w", "-c", gw0)
	if code != exitStoreOK || !strings.Contains(out, "member w replaced") {
		t.Fatalf("store replace: exit %d\n%s%s", code, out, errs)
	}
	f.startStore("w", witness)
	f.waitHealthy(gw0)
	checkRestore(t, f, gw0)
}

// checkRestore stamps the bridges' session row, snapshots, stamps a
// higher epoch, restores, and checks the row is released above both and
// that the bridge that takes it next stamps an epoch above both.
func checkRestore(t *testing.T, f *fleet, file string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := loadStore("test", file, os.Stderr)
	st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: cfg.StoreEndpoints(), KeyPrefix: "/fleet-test/"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const session = "plc" // testbin.Config's
	rev, err := st.CompareAndSwap(ctx, session, 0, lease.Row{Owner: "x#1", Node: "x", Epoch: 9})
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(f.dir, "snap.json")
	if code, out, errs := runCmd(t, "store", "snapshot", snap, "-c", file); code != exitStoreOK {
		t.Fatalf("snapshot: exit %d\n%s%s", code, out, errs)
	}
	const stamped = 12
	if _, err := st.CompareAndSwap(ctx, session, rev, lease.Row{Owner: "x#2", Node: "x", Epoch: stamped}); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCmd(t, "store", "restore", snap, "-c", file, "--json"); code != exitStoreOK {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errs)
	}
	row, _, err := st.Read(ctx, session)
	if err != nil || row.Owner != "" || row.Epoch < stamped+fleetstore.MinEpochRaise {
		t.Fatalf("after restore: %+v %v, want released with epoch >= %d", row, err, stamped+fleetstore.MinEpochRaise)
	}
	restored := row.Epoch
	addr := testbin.FreeAddr(t)
	launch(t, f.dir, "gw0", addr, f.bridgeFile("gw0", addr))
	testbin.Observe(t, time.Minute, func() (bool, string) {
		row, _, err = st.Read(context.Background(), session)
		return err == nil && row.Owner != "", fmt.Sprintf("%+v %v", row, err)
	})
	if row.Epoch <= restored {
		t.Fatalf("the bridge took the restored row at epoch %d, want above %d", row.Epoch, restored)
	}
	t.Logf("stamped %d before the restore; restored at %d; the next owner %s stamps %d", stamped, restored, row.Node, row.Epoch)
}

// admit accepts a two-member file and warns, at the members' line, that
// it survives the loss of neither; `store` on a node outside the members
// exits 2 naming the file's line.
func TestAdmitWarnsTwoMembersAndStoreRefusesNonMember(t *testing.T) {
	f := newFleet(t, false, "gw0", "gw1")
	file := f.write("gw0", f.bridgeFile("gw0", testbin.FreeAddr(t)))
	code, out, errs := runCmd(t, "admit", "-c", file)
	if code != exitOK || !strings.Contains(out, "warning: "+file+":") || !strings.Contains(out, "the loss of either member stops the store") {
		t.Fatalf("admit: exit %d\n%s%s", code, out, errs)
	}
	outside := f.write("gw9", strings.Replace(f.bridgeFile("gw0", testbin.FreeAddr(t)), "node: gw0\n", "node: gw9\n", 1))
	code, _, errs = runCmd(t, "store", "-c", outside, "--log-format", "text")
	if code != exitStoreInvalid || !strings.Contains(errs, `node \"gw9\" is not one of the members`) || !strings.Contains(errs, outside+":") {
		t.Fatalf("store on a non-member: exit %d\n%s", code, errs)
	}
}
