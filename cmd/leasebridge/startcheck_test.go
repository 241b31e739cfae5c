package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
)

// TestReadOnlyStoreUserRefusedAtStart: with etcd auth on and a user that
// may read but not write the prefix, run once stood by forever on a free
// row, ready, with a WARN every heartbeat. It exits 2 at start naming
// the user, the key and the permission; a user that may read and write
// the prefix runs and owns the session.
func TestReadOnlyStoreUserRefusedAtStart(t *testing.T) {
	p := startRunPeers(t)
	c := testetcd.StartEmbedded(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "/auth-test/"
	for user, perm := range map[string]clientv3.PermissionType{"reader": clientv3.PermissionType(clientv3.PermRead), "bridge": clientv3.PermissionType(clientv3.PermReadWrite)} {
		if _, err := cli.RoleAdd(ctx, user); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), perm); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.UserAdd(ctx, user, "pw-"+user); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.UserGrantRole(ctx, user, user); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	if err := c.EnableAuth(ctx, "root-pw"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LB_TEST_READER_PW", "pw-reader")
	t.Setenv("LB_TEST_BRIDGE_PW", "pw-bridge")
	start := func(user string) *proc {
		addr := testbin.FreeAddr(t)
		y := testbin.Config(testbin.Bridge{Etcd: c.Endpoints()[0], Broker: p.broker.URL, PLC: p.plc.Addr(), Node: "node-" + user,
			HTTP: addr, KeyPrefix: prefix, Topic: "{device}/{tag}"})
		y = strings.Replace(y, "key_prefix: "+prefix+"}", "key_prefix: "+prefix+", username: "+user+", password_env: LB_TEST_"+strings.ToUpper(user)+"_PW}", 1)
		return launch(t, p.dir, "node-"+user, addr, y)
	}
	r := start("reader")
	if code := r.waitExit(t, r.report.OwnerDeath.Total); code != exitInvalid {
		t.Errorf("read-only user: exit %d, want %d", code, exitInvalid)
	}
	if log := r.logText(); !strings.Contains(log, "lease_store.username reader") || !strings.Contains(log, `write on key \"/auth-test/_nodes/node-reader\"`) {
		t.Errorf("the refusal does not name the user, the key and the permission:\n%s", log)
	}
	b := start("bridge")
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{b.bridgeProc}, nil, b.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
}

// TestDuplicateNodeNameStopsTheSecond: two processes from one copied
// file once ran side by side under one node name. The second stops at
// start, exit 2, naming both identities; a process that replaces a
// killed one of its name (a crash, then a restart within the node row's
// TTL) is not a twin and starts.
func TestDuplicateNodeNameStopsTheSecond(t *testing.T) {
	p := startRunPeers(t)
	start := func(file string) *proc {
		addr := testbin.FreeAddr(t)
		y := testbin.Config(testbin.Bridge{Etcd: p.etcd.Endpoints[0], Broker: p.broker.URL, PLC: p.plc.Addr(), Node: "node-a",
			HTTP: addr, KeyPrefix: "/twin-test/", Topic: "{device}/{tag}"})
		return launch(t, p.dir, file, addr, y)
	}
	a := start("first")
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{a.bridgeProc}, nil, a.report.OwnerDeath.Total); err != nil {
		t.Fatal(err)
	}
	twin := start("twin")
	if code := twin.waitExit(t, a.report.OwnerDeath.Total); code != exitInvalid {
		t.Errorf("second process of node-a: exit %d, want %d", code, exitInvalid)
	}
	identity := regexp.MustCompile(`owner_identity=(\S+)`)
	first, second := identity.FindStringSubmatch(a.logText()), identity.FindStringSubmatch(twin.logText())
	log := twin.logText()
	if first == nil || !strings.Contains(log, "is run by "+first[1]) || !strings.Contains(log, "node name is in use") {
		t.Errorf("the refusal does not name the running identity %v:\n%s", first, log)
	}
	if second != nil {
		t.Errorf("the twin ran as %s", second[1])
	}
	if !regexp.MustCompile(`this process is node-a#\w+`).MatchString(log) {
		t.Errorf("the refusal does not name the twin's identity:\n%s", log)
	}
	// A crash, then a restart at once: the dead process's row is still
	// live, but nobody rewrites it.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t, 10*time.Second)
	again := start("restarted")
	if _, _, err := waitOwner(context.Background(), []*bridgeProc{again.bridgeProc}, nil, 2*a.report.OwnerDeath.Total); err != nil {
		t.Fatalf("the restarted node-a: %v", err)
	}
	if _, err := os.Stat(again.log); err != nil {
		t.Fatal(err)
	}
}
