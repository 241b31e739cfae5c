// Package bridgewatch reads running bridges' /sessions, for the demo
// (cmd/leasebridge-demo) and the process tests of cmd/leasebridge, which
// wait for a bridge to own its one session, or to stand by.
package bridgewatch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/leasebridge/leasebridge/failover"
)

// poll is how often the waits ask again.
const poll = 50 * time.Millisecond

// Sessions reads the per-session status of the bridge whose http_listen
// is addr.
func Sessions(ctx context.Context, client *http.Client, addr string) ([]failover.SessionStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/sessions", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st []failover.SessionStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("/sessions at %s: %w", addr, err)
	}
	return st, nil
}

// WaitOwner asks the bridges of procs, each at its http_listen addr(p),
// all but skip, until one owns its one session at ServiceLevelFull, and
// returns it and its status; an error once limit passed or ctx ended.
func WaitOwner[P comparable](ctx context.Context, procs []P, addr func(P) string, skip P, limit time.Duration) (P, failover.SessionStatus, error) {
	var none P
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if p == skip {
				continue
			}
			st, err := Sessions(ctx, client, addr(p))
			if err == nil && len(st) == 1 && st[0].Owner && st[0].ServiceLevelFull {
				return p, st[0], nil
			}
		}
		select {
		case <-ctx.Done():
			return none, failover.SessionStatus{}, context.Cause(ctx)
		case <-time.After(poll):
		}
	}
	return none, failover.SessionStatus{}, fmt.Errorf("no bridge reached ServiceLevelFull within %s", limit)
}

// WaitStandby waits until the bridge at addr answers with its one session
// not owned: a standby watching the row.
func WaitStandby(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		if st, err := Sessions(ctx, client, addr); err == nil && len(st) == 1 && !st[0].Owner {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not a standby within %s", addr, limit)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(poll):
		}
	}
}
