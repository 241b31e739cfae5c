package fleetstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/redact"
)

// ErrRunning reports a replace of a member that still answers: replace is
// for a member whose data is lost, stopped first.
var ErrRunning = errors.New("fleetstore: member is running")

// ErrUnknownMember reports a replace of a name the cluster does not know.
var ErrUnknownMember = errors.New("fleetstore: no such member")

// Ops are the operations on a running fleet store, through its members'
// client URLs.
type Ops struct {
	cli *clientv3.Client
	// Call bounds each member's status call (default 2 s).
	Call time.Duration
}

// Dial connects to the members at endpoints; it does not wait for them.
func Dial(endpoints []string, tc *tls.Config) (*Ops, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tc, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("fleetstore: connect to %v: %w", redact.URLs(endpoints), err)
	}
	return &Ops{cli: cli, Call: 2 * time.Second}, nil
}

// Close closes the connection.
func (o *Ops) Close() error { return o.cli.Close() }

// Client is the etcd client, for the row operations of restore.go.
func (o *Ops) Client() *clientv3.Client { return o.cli }

// MemberHealth is one member as `leasebridge store members` prints it.
type MemberHealth struct {
	Name       string   `json:"name"`
	ID         string   `json:"id"`
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
	// Started is false for a member added by replace and not started yet.
	Started bool `json:"started"`
	// Reachable: the member answered a status call within Ops.Call.
	Reachable bool   `json:"reachable"`
	Leader    bool   `json:"leader"`
	RaftTerm  uint64 `json:"raft_term"`
	RaftIndex uint64 `json:"raft_index"`
	DBSize    int64  `json:"db_size_bytes"`
	// Alarms are the cluster's alarms raised on this member (NOSPACE,
	// CORRUPT).
	Alarms []string `json:"alarms"`
	// Error is why the member did not answer, or what it reported.
	Error string `json:"error,omitempty"`
}

// Members lists the cluster's members with each one's health.
func (o *Ops) Members(ctx context.Context) ([]MemberHealth, error) {
	// The list comes from whichever member answers first; a dead endpoint
	// tried first costs a reconnect, so it gets more than one status call.
	lctx, cancel := context.WithTimeout(ctx, 3*o.Call)
	resp, err := o.cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("fleetstore: member list: %w", err)
	}
	alarms := map[uint64][]string{}
	actx, cancel := context.WithTimeout(ctx, o.Call)
	if ar, err := o.cli.AlarmList(actx); err == nil {
		for _, a := range ar.Alarms {
			alarms[a.MemberID] = append(alarms[a.MemberID], a.Alarm.String())
		}
	}
	cancel()
	out := make([]MemberHealth, 0, len(resp.Members))
	for _, m := range resp.Members {
		h := MemberHealth{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs,
			Started: len(m.ClientURLs) > 0, Alarms: append([]string{}, alarms[m.ID]...)}
		o.status(ctx, &h, m.ID)
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b MemberHealth) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// status fills h from the member's own status answer.
func (o *Ops) status(ctx context.Context, h *MemberHealth, id uint64) {
	if len(h.ClientURLs) == 0 {
		h.Error = "not started: no client URL yet"
		return
	}
	sctx, cancel := context.WithTimeout(ctx, o.Call)
	defer cancel()
	st, err := o.cli.Status(sctx, h.ClientURLs[0])
	if err != nil {
		h.Error = redact.Text(err.Error())
		return
	}
	h.Reachable, h.Leader = true, st.Leader == id
	h.RaftTerm, h.RaftIndex, h.DBSize = st.RaftTerm, st.RaftIndex, st.DbSize
	if len(st.Errors) > 0 {
		h.Error = strings.Join(st.Errors, "; ")
	}
}

// Replaced is what Replace did.
type Replaced struct {
	Name    string `json:"name"`
	PeerURL string `json:"peer_url"`
	// RemovedID is the lost member's id, empty when it was already
	// removed; AddedID the new, empty member's.
	RemovedID string `json:"removed_id,omitempty"`
	AddedID   string `json:"added_id"`
}

// Replace removes the member named name (refusing one that still
// answers) and adds an empty member with the same peer URL, which
// `leasebridge store` then starts with an empty data directory. A member
// already removed, or already added and not started, is completed.
func (o *Ops) Replace(ctx context.Context, name, peerURL string) (Replaced, error) {
	r := Replaced{Name: name, PeerURL: peerURL}
	resp, err := o.cli.MemberList(ctx)
	if err != nil {
		return r, fmt.Errorf("fleetstore: member list: %w", err)
	}
	for _, m := range resp.Members {
		if m.Name != name && !slices.Contains(m.PeerURLs, peerURL) {
			continue
		}
		if len(m.ClientURLs) == 0 {
			r.AddedID = fmt.Sprintf("%x", m.ID)
			return r, nil // never started: it can join empty as it is
		}
		h := MemberHealth{ClientURLs: m.ClientURLs}
		o.status(ctx, &h, m.ID)
		if h.Reachable {
			return r, fmt.Errorf("%w: %s answers at %s; stop it (and wipe its data directory) before replacing it", ErrRunning, name, redact.URLs(m.ClientURLs))
		}
		if _, err := o.cli.MemberRemove(ctx, m.ID); err != nil {
			return r, fmt.Errorf("fleetstore: remove member %s (%x): %w", name, m.ID, err)
		}
		r.RemovedID = fmt.Sprintf("%x", m.ID)
	}
	add, err := o.add(ctx, peerURL)
	if err != nil {
		return r, fmt.Errorf("fleetstore: add member %s at %s: %w", name, peerURL, err)
	}
	r.AddedID = fmt.Sprintf("%x", add.Member.ID)
	return r, nil
}

// add adds a member at peerURL. Right after a removal etcd may refuse
// with "unhealthy cluster" (its strict reconfiguration check wants every
// voting member connected for the last 5 s, and the removal may not be
// applied yet where the request lands): that is retried until ctx ends.
func (o *Ops) add(ctx context.Context, peerURL string) (*clientv3.MemberAddResponse, error) {
	for {
		add, err := o.cli.MemberAdd(ctx, []string{peerURL})
		if err == nil || !errors.Is(rpctypes.Error(err), rpctypes.ErrUnhealthy) {
			return add, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (until %w)", err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
