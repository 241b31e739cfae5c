// Package fleetstore runs one member of the etcd cluster a fleet keeps as
// its own lease store (lease_store.members): `leasebridge store` runs it
// in its own process, beside the bridge, so a bridge that exits or crashes
// never takes a member with it. The members bootstrap from the static
// list in the configuration; a restarted member rejoins with its data; a
// member with no data whose cluster already runs joins only as the empty
// member `leasebridge store replace` added, never as a second cluster.
// The package also holds the operations on a running cluster (ops.go).
package fleetstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasebridge/leasebridge/lease/etcdembed"
)

// Sentinel errors. Each refusal is made before anything is written.
var (
	// ErrNotMember reports a node that is not in the member list.
	ErrNotMember = errors.New("fleetstore: node is not a store member")
	// ErrMismatch reports a configured member list that differs from the
	// running cluster's, or from the one the data directory records.
	ErrMismatch = errors.New("fleetstore: member list differs from the cluster's")
	// ErrWiped reports a member with no data whose cluster runs with it
	// as a member that has started before: its data was lost, and joining
	// empty could cost the cluster votes it already counted.
	ErrWiped = errors.New("fleetstore: member has no data but its cluster knows it")
	// ErrForeignDir reports a data directory of another member or cluster.
	ErrForeignDir = errors.New("fleetstore: data directory belongs to another member or cluster")
	// ErrStopped reports a member that stopped, or a start cancelled.
	ErrStopped = errors.New("fleetstore: member stopped")
)

// Member is one entry of lease_store.members.
type Member struct {
	Name, PeerURL, ClientURL string
}

// TLSFiles are PEM files: the fleet CA, and a certificate with its key.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// Options configure Start.
type Options struct {
	// Name is this member's name; Members must list it.
	Name    string
	Members []Member
	// Dir is the member's data directory; Dir + ".lock" is its lock file.
	Dir string
	// Heartbeat and Election are the raft timing (whole milliseconds).
	Heartbeat, Election time.Duration
	// TLS is the member's certificate, for its client and peer listeners
	// (both require a client certificate from TLS.CAFile) and for its own
	// peer connections; nil runs plaintext.
	TLS *TLSFiles
	// Probe bounds asking the other members whether their cluster runs
	// (default 3 s).
	Probe time.Duration
	// ClusterToken, when set, replaces the token derived from the member
	// list at a first bootstrap: a cluster rebuilt after a quorum loss
	// then gets a new cluster id, and a member still holding the old
	// cluster's data is refused instead of corrupting the new one. Every
	// member bootstrapping together must be given the same token; etcd
	// ignores it for a member with data or one that joins.
	ClusterToken string
	// Logger receives etcd's warnings and errors and the member's own
	// progress; nil discards them.
	Logger *slog.Logger
	// OnFatal is called instead of etcd's exit on an unrecoverable error
	// (etcdembed.Options.OnFatal); it must not return.
	OnFatal func(err error)
}

// Server is a running member.
type Server struct {
	// Joined is true when the member joined a running cluster as an
	// empty member that never started (added by `store replace`, or late
	// to the first start).
	Joined bool
	etcd   *embed.Etcd
	unlock func()
	quiet  *atomic.Bool
	once   sync.Once
}

// Start checks the member list and the data directory against each other
// and against the running cluster, then runs the member and waits until
// it serves (which, at a first bootstrap, takes a quorum of members) or
// ctx ends.
func Start(ctx context.Context, o Options) (*Server, error) {
	self, err := o.self()
	if err != nil {
		return nil, err
	}
	if o.Probe <= 0 {
		o.Probe = 3 * time.Second
	}
	if err := checkDir(o); err != nil {
		return nil, err
	}
	live, err := probe(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := checkCluster(o, live); err != nil {
		return nil, err
	}
	cfg, joined, err := o.plan(self, live)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("fleetstore: create data directory %s: %w", o.Dir, err)
	}
	unlock, err := etcdembed.LockDir(o.Dir)
	if err != nil {
		return nil, err
	}
	etcdembed.WarnFree(o.Logger, o.Dir)
	if !hasData(o.Dir) {
		// Recorded before etcd writes anything, so a first start stopped
		// while it waits for a quorum is still this member's directory.
		if err := writeIdentity(o.Dir, identity{Member: o.Name, Members: listOf(o.Members)}); err != nil {
			unlock()
			return nil, err
		}
	}
	s := &Server{Joined: joined, unlock: unlock, quiet: new(atomic.Bool)}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdembed.ZapLogger(o.Logger, o.Dir, o.OnFatal, s.quiet))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		unlock()
		return nil, etcdembed.Classify(fmt.Errorf("fleetstore: start member %s in %s: %w", o.Name, o.Dir, err), o.Dir)
	}
	s.etcd = e
	if err := s.waitReady(ctx, o); err != nil {
		s.Close()
		return nil, err
	}
	return s, s.record(o)
}

// self is this member's entry.
func (o Options) self() (Member, error) {
	for _, m := range o.Members {
		if m.Name == o.Name {
			return m, nil
		}
	}
	names := make([]string, len(o.Members))
	for i, m := range o.Members {
		names[i] = m.Name
	}
	return Member{}, fmt.Errorf("%w: %q is not one of lease_store.members (%s)", ErrNotMember, o.Name, strings.Join(names, ", "))
}

// plan is the member's etcd configuration: a restart with data, a first
// bootstrap from the static list when no other member runs a cluster, or
// a join as the empty member a replace added.
func (o Options) plan(self Member, live *liveCluster) (*embed.Config, bool, error) {
	cfg, err := o.config(self)
	if err != nil {
		return nil, false, err
	}
	if live == nil || hasData(o.Dir) {
		return cfg, false, nil
	}
	// No data, and the cluster runs: join only as a member with this peer
	// URL that never started (added by replace, or of the initial list and
	// late to its first start).
	var pairs []string
	joinable := false
	for _, m := range live.members {
		name := m.name
		if slices.Contains(m.peerURLs, self.PeerURL) {
			if m.started {
				return nil, false, fmt.Errorf("%w: cluster %s at %s lists %q as a started member, but %s holds no data (wiped or lost): run `leasebridge store replace %s -c FILE` on another member's node, then start this one again",
					ErrWiped, live.clusterID, live.endpoint, o.Name, o.Dir, o.Name)
			}
			name, joinable = o.Name, true
		}
		for _, u := range m.peerURLs {
			pairs = append(pairs, name+"="+u)
		}
	}
	if !joinable {
		return nil, false, fmt.Errorf("%w: cluster %s at %s runs without member %q (%s): run `leasebridge store replace %s -c FILE` on another member's node, then start this one again",
			ErrWiped, live.clusterID, live.endpoint, o.Name, self.PeerURL, o.Name)
	}
	cfg.InitialCluster = strings.Join(pairs, ",")
	cfg.ClusterState = embed.ClusterStateFlagExisting
	return cfg, true, nil
}

// config is the etcd configuration of a first bootstrap from the static
// list; etcd ignores the initial cluster when the directory has data.
func (o Options) config(self Member) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = o.Name, o.Dir
	var err error
	if cfg.AdvertisePeerUrls, err = urls(self.PeerURL); err != nil {
		return nil, err
	}
	if cfg.AdvertiseClientUrls, err = urls(self.ClientURL); err != nil {
		return nil, err
	}
	cfg.ListenPeerUrls, cfg.ListenClientUrls = listenURLs(cfg.AdvertisePeerUrls), listenURLs(cfg.AdvertiseClientUrls)
	pairs := make([]string, len(o.Members))
	for i, m := range o.Members {
		pairs[i] = m.Name + "=" + m.PeerURL
	}
	cfg.InitialCluster = strings.Join(pairs, ",")
	cfg.InitialClusterToken = clusterToken(o.Members)
	if o.ClusterToken != "" {
		cfg.InitialClusterToken = o.ClusterToken
	}
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs, cfg.ElectionMs = uint(o.Heartbeat.Milliseconds()), uint(o.Election.Milliseconds())
	etcdembed.SetDisk(cfg)
	if o.TLS != nil {
		info := transport.TLSInfo{CertFile: o.TLS.CertFile, KeyFile: o.TLS.KeyFile, TrustedCAFile: o.TLS.CAFile, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	return cfg, nil
}

// listenURLs are where a member listens for its advertised URLs: the
// same address when it is an IP address (or localhost), else every
// address at that port. etcd binds only IP addresses, and a member named
// by DNS (a Kubernetes StatefulSet's pod) must still be reached there.
func listenURLs(adv []url.URL) []url.URL {
	out := make([]url.URL, len(adv))
	for i, u := range adv {
		out[i] = u
		if h := u.Hostname(); h != "localhost" && net.ParseIP(h) == nil {
			out[i].Host = net.JoinHostPort("0.0.0.0", u.Port())
		}
	}
	return out
}

func urls(s string) ([]url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("fleetstore: url %q: %w", s, err)
	}
	return []url.URL{*u}, nil
}

// waitReady waits until the member serves, logging while it waits for a
// quorum, until the member fails or ctx ends.
func (s *Server) waitReady(ctx context.Context, o Options) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.etcd.Server.ReadyNotify():
			return nil
		case e := <-s.etcd.Err():
			return etcdembed.Classify(fmt.Errorf("%w: member %s in %s: %w", ErrStopped, o.Name, o.Dir, e), o.Dir)
		case <-ctx.Done():
			return fmt.Errorf("%w: start of member %s cancelled: %w", ErrStopped, o.Name, ctx.Err())
		case <-tick.C:
			if o.Logger != nil {
				o.Logger.Info("store member waiting for a quorum of members", "member", o.Name, "members", listOf(o.Members))
			}
		}
	}
}

// record writes the identity file once the member serves, after checking
// the cluster's members against the configured list (a restart with
// data whose peers were all down could not be checked before).
func (s *Server) record(o Options) error {
	var got []string
	for _, m := range s.etcd.Server.Cluster().Members() {
		name := m.Name
		if name == "" {
			name = "(not started)"
		}
		for _, u := range m.PeerURLs {
			got = append(got, name+"="+u)
		}
	}
	slices.Sort(got)
	want := listOf(o.Members)
	if !sameMembers(got, want) {
		s.Close()
		return fmt.Errorf("%w: the configured members [%s] differ from the cluster's [%s]",
			ErrMismatch, strings.Join(want, " "), strings.Join(got, " "))
	}
	return writeIdentity(o.Dir, identity{Member: o.Name, ClusterID: s.etcd.Server.Cluster().ID().String(),
		MemberID: s.etcd.Server.MemberID().String(), Members: want})
}

// sameMembers compares a cluster's name=peer pairs with the configured
// ones; a member added but not started yet has no name and matches any
// name with its peer URL.
func sameMembers(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	peers := map[string]string{}
	for _, w := range want {
		name, peer, _ := strings.Cut(w, "=")
		peers[peer] = name
	}
	for _, g := range got {
		name, peer, _ := strings.Cut(g, "=")
		if w, ok := peers[peer]; !ok || (name != "(not started)" && name != w) {
			return false
		}
	}
	return true
}

// Err reports the member's failure while it runs.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member, waiting at most etcdembed.CloseTimeout, and
// releases the data directory's lock once it has stopped; calling it twice
// is safe.
func (s *Server) Close() {
	s.once.Do(func() { etcdembed.Stop(s.etcd, s.unlock, s.quiet) })
}
