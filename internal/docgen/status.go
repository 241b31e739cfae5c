package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// fleetExample is the configuration status-json.md's example reads.
const fleetExample = "../../examples/edge-fleet.yaml"

// exampleFleet is a fixed store state for the status example: edge-gw-1
// died three minutes ago owning line-1 (pinned to it), edge-gw-3 serves
// line-2 while its preferred node edge-gw-2 asks for it back, and core-1
// serves the uplink with a lease_ttl from an older file.
type exampleFleet struct {
	now    time.Time
	timing lease.RowTiming
}

var _ lease.Fleet = exampleFleet{}

func (f exampleFleet) at(ago time.Duration) int64 { return f.now.Add(-ago).UnixNano() }

func (f exampleFleet) Nodes(context.Context) (map[string]lease.NodeRow, error) {
	n := func(name, suffix string, ago time.Duration, sessions, owned, serving []string) lease.NodeRow {
		return lease.NodeRow{Node: name, Owner: name + "#" + suffix, Sessions: sessions, Owned: owned, Serving: serving,
			Interval: f.timing.RenewInterval, TTL: f.timing.LeaseTTL, RenewedAt: f.at(ago)}
	}
	return map[string]lease.NodeRow{
		"edge-gw-1": n("edge-gw-1", "0b7e4c1d9a22", 3*time.Minute, []string{"line-1", "uplink"}, []string{"line-1"}, []string{"line-1"}),
		"edge-gw-2": n("edge-gw-2", "91c3f0aa4e10", 2*time.Second, []string{"line-2", "uplink"}, nil, nil),
		"edge-gw-3": n("edge-gw-3", "5f0c2a91d3e4", 6*time.Second, []string{"line-2", "uplink"}, []string{"line-2"}, []string{"line-2"}),
		"core-1":    n("core-1", "d4a8e27b6c03", 9*time.Second, []string{"uplink"}, []string{"uplink"}, []string{"uplink"}),
	}, nil
}

func (f exampleFleet) Rows(_ context.Context, keys []string) (map[string]lease.VersionedRow, error) {
	older := f.timing
	older.LeaseTTL, older.FenceAfter = 60*time.Second, 57*time.Second
	all := map[string]lease.VersionedRow{
		"line-1": {Version: 4711, Row: lease.Row{Owner: "edge-gw-1#0b7e4c1d9a22", Node: "edge-gw-1", Epoch: 7, Timing: f.timing, RenewedAt: f.at(3 * time.Minute)}},
		"line-2": {Version: 5210, Row: lease.Row{Owner: "edge-gw-3#5f0c2a91d3e4", Node: "edge-gw-3", Epoch: 12, Timing: f.timing, RenewedAt: f.at(4 * time.Second)}},
		"uplink": {Version: 5207, Row: lease.Row{Owner: "core-1#d4a8e27b6c03", Node: "core-1", Epoch: 3, Timing: older, RenewedAt: f.at(7 * time.Second)}},
	}
	out := map[string]lease.VersionedRow{}
	for _, k := range keys {
		out[k] = all[k]
	}
	return out, nil
}

func (f exampleFleet) Control(context.Context) (lease.Control, error) {
	return lease.Control{Handovers: map[string]lease.HandoverRequest{
		"line-2": {Session: "line-2", Epoch: 12, Owner: "edge-gw-3#5f0c2a91d3e4", To: "edge-gw-2", RequestedAt: f.at(time.Second)},
	}, Draining: map[string]bool{}}, nil
}

func (exampleFleet) PutNode(context.Context, lease.NodeRow) error { return nil }
func (exampleFleet) RequestHandover(context.Context, lease.HandoverRequest, time.Duration) error {
	return nil
}
func (exampleFleet) ClearHandover(context.Context, string, uint64) error { return nil }
func (exampleFleet) SetDrain(context.Context, string, bool) error        { return nil }
func (exampleFleet) WatchControl(context.Context) <-chan struct{}        { return nil }
func (exampleFleet) WatchRow(context.Context, string) <-chan struct{}    { return nil }

// statusExample is what `leasebridge status --json` prints for the edge
// fleet example against exampleFleet's store state.
func statusExample() (string, error) {
	cfg, err := routes.Load(fleetExample)
	if err != nil {
		return "", err
	}
	reports, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 {
		return "", errs
	}
	f := exampleFleet{now: time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC), timing: lease.ConfigFromReport(reports[0]).RowTiming()}
	st, err := fleetview.Read(context.Background(), cfg, reports, f, f.now)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(st); err != nil {
		return "", err
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}
