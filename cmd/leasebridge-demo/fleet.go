package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/lease/fleetstore"
)

// demoStoreBlock is the lease_store block of demoConfig, which the fleet
// mode replaces with the members.
const demoStoreBlock = "lease_store:\n  endpoints: [%s]\n  key_prefix: /leasebridge-demo/\n"

// fleetConfig is y with its lease_store block replaced by the fleet's own
// members and node's data_dir. The members talk plaintext: the demo runs
// on loopback, and `plaintext: true` says so (a deployment uses TLS,
// docs/fleet-store.md).
func fleetConfig(y, dataDir, members string) (string, error) {
	start := strings.Index(y, "lease_store:\n")
	end := strings.Index(y, "  key_prefix: /leasebridge-demo/\n")
	if start < 0 || end < start {
		return "", fmt.Errorf("the demo configuration has no lease_store block like %q", demoStoreBlock)
	}
	end += len("  key_prefix: /leasebridge-demo/\n")
	block := fmt.Sprintf("data_dir: %s\nlease_store:\n  key_prefix: /leasebridge-demo/\n  plaintext: true\n  members:\n%s", dataDir, members)
	return y[:start] + block + y[end:], nil
}

// startStores, in fleet mode, lays out the three members on loopback,
// writes each node's file, starts `leasebridge store -c FILE` on each and
// waits until `leasebridge store members` reports the store healthy.
func (d *demoEnv) startStores() error {
	if !d.fleet {
		return nil
	}
	for _, name := range d.nodes() {
		peer, err := freeAddr()
		if err != nil {
			return err
		}
		client, err := freeAddr()
		if err != nil {
			return err
		}
		d.members += fmt.Sprintf("    - {name: %s, peer_url: \"http://%s\", client_url: \"http://%s\"}\n", name, peer, client)
		d.clients = append(d.clients, "http://"+client)
	}
	for _, name := range d.nodes() {
		path, _, err := d.config(name)
		if err != nil {
			return err
		}
		p, err := d.spawn(name, "", "store", "-c", path, "--log-format", "text")
		if err != nil {
			return err
		}
		d.stores = append(d.stores, p)
	}
	fmt.Fprintf(d.out, "started `leasebridge store` on node-a, node-b and node-c: the fleet's own lease store, no etcd to install\n")
	out, err := d.waitStore(time.Minute)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "leasebridge store members:\n%s", out)
	return nil
}

// waitStore runs `leasebridge store members` until it exits 0 (every
// member reachable, one leader) and returns what it printed.
func (d *demoEnv) waitStore(limit time.Duration) (string, error) {
	path, _, err := d.config(d.nodes()[0])
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(limit)
	for {
		out, err := exec.CommandContext(d.ctx, d.bridge, "store", "members", "-c", path).CombinedOutput()
		if err == nil {
			return string(out), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the fleet's store is not healthy after %s (logs in %s): %w\n%s", limit, d.dir, err, out)
		}
		select {
		case <-d.ctx.Done():
			return "", context.Cause(d.ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// memberOf is the member process on bridge p's node; nil unless in
// fleet mode.
func (d *demoEnv) memberOf(p *bridgeProc) *bridgeProc {
	for _, m := range d.stores {
		if m.name == p.name {
			return m
		}
	}
	return nil
}

// leads reports whether node's member is the store's leader, as
// `leasebridge store members --json` says.
func (d *demoEnv) leads(node string) bool {
	ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, d.bridge, "store", "members", "--json", "-c", filepath.Join(d.dir, node+".yaml")).Output()
	if err != nil {
		return false
	}
	var doc struct {
		Members []struct {
			Name   string `json:"name"`
			Leader bool   `json:"leader"`
		} `json:"members"`
	}
	if json.NewDecoder(bytes.NewReader(out)).Decode(&doc) != nil {
		return false
	}
	for _, m := range doc.Members {
		if m.Name == node {
			return m.Leader
		}
	}
	return false
}

// leadOwner moves the store's leadership to the owner's member (etcd's
// MoveLeader, asked of the current leader), so that killing the owner's
// node takes the leader with it: the case the store_recovery term pays
// for. The owner must still be serving afterwards.
func (d *demoEnv) leadOwner(owner *bridgeProc) error {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	clis := make([]*fleetstore.Ops, len(d.clients))
	for j, u := range d.clients {
		ops, err := fleetstore.Dial([]string{u}, nil)
		if err != nil {
			return err
		}
		defer ops.Close()
		clis[j] = ops
	}
	target := slices.Index(d.nodes(), owner.name)
	var last error
	for {
		lead, ids, err := d.leader(ctx, clis)
		if err == nil && lead == target {
			break
		}
		if err == nil {
			_, err = clis[lead].Client().MoveLeader(ctx, ids[target])
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("moving the store's leadership to %s's member: %w (last: %v)", owner.name, context.Cause(ctx), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Fprintf(d.out, "moved the store's leadership to %s's member (etcd's MoveLeader), so killing %s kills the leader too\n", owner.name, owner.name)
	now, _, err := waitOwner(d.ctx, d.procs, nil, d.budget.OwnerDeath.Total)
	if err == nil && now != owner {
		err = fmt.Errorf("the session moved to %s while the store's leadership moved", now.name)
	}
	return err
}

// leader asks every member for its status: the index of the member all
// name as leader, and every member's id.
func (d *demoEnv) leader(ctx context.Context, clis []*fleetstore.Ops) (int, []uint64, error) {
	ids := make([]uint64, len(clis))
	var lead uint64
	for j, cli := range clis {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Client().Status(sctx, d.clients[j])
		cancel()
		if err != nil {
			return -1, nil, err
		}
		if st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return -1, nil, fmt.Errorf("the members do not agree on a leader yet")
		}
		ids[j], lead = st.Header.MemberId, st.Leader
	}
	i := slices.Index(ids, lead)
	if i < 0 {
		return -1, nil, fmt.Errorf("the leader %x is none of the members", lead)
	}
	return i, ids, nil
}
