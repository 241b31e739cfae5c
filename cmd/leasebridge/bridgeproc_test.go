package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"time"

	"github.com/leasebridge/leasebridge/failover"
)

// bridgeProc is one `leasebridge run` process of a test.
type bridgeProc struct {
	name string
	http string // its http_listen
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process was waited for
}

// sessions reads a bridge's per-session status from /sessions.
func sessions(client *http.Client, p *bridgeProc) ([]failover.SessionStatus, error) {
	resp, err := client.Get("http://" + p.http + "/sessions")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st []failover.SessionStatus
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// waitOwner polls the bridges' /sessions until one other than skip owns its
// one session at ServiceLevelFull.
func waitOwner(ctx context.Context, procs []*bridgeProc, skip *bridgeProc, limit time.Duration) (*bridgeProc, failover.SessionStatus, error) {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if p == skip {
				continue
			}
			st, err := sessions(client, p)
			if err == nil && len(st) == 1 && st[0].Owner && st[0].ServiceLevelFull {
				return p, st[0], nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, failover.SessionStatus{}, context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, failover.SessionStatus{}, fmt.Errorf("no bridge reached ServiceLevelFull within %s", limit)
}

// sessionStatus reads the one session's status from /sessions at addr.
func sessionStatus(client *http.Client, addr string) (failover.SessionStatus, error) {
	st, err := sessions(client, &bridgeProc{http: addr})
	if err != nil {
		return failover.SessionStatus{}, fmt.Errorf("/sessions at %s: %w", addr, err)
	}
	if len(st) != 1 {
		return failover.SessionStatus{}, fmt.Errorf("/sessions at %s: %d sessions, want 1", addr, len(st))
	}
	return st[0], nil
}
