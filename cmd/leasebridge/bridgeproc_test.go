package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"time"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/bridgewatch"
)

// bridgeProc is one `leasebridge run` process of a test.
type bridgeProc struct {
	name string
	http string // its http_listen
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process was waited for
}

// waitOwner waits until a bridge other than skip owns its one session at
// ServiceLevelFull.
func waitOwner(ctx context.Context, procs []*bridgeProc, skip *bridgeProc, limit time.Duration) (*bridgeProc, failover.SessionStatus, error) {
	return bridgewatch.WaitOwner(ctx, procs, func(p *bridgeProc) string { return p.http }, skip, limit)
}

// sessionStatus reads the one session's status from /sessions at addr.
func sessionStatus(client *http.Client, addr string) (failover.SessionStatus, error) {
	st, err := bridgewatch.Sessions(context.Background(), client, addr)
	if err != nil {
		return failover.SessionStatus{}, fmt.Errorf("/sessions at %s: %w", addr, err)
	}
	if len(st) != 1 {
		return failover.SessionStatus{}, fmt.Errorf("/sessions at %s: %d sessions, want 1", addr, len(st))
	}
	return st[0], nil
}
