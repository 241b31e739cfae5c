package fleetstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/internal/redact"
)

// liveCluster is what a running member answered about its cluster.
type liveCluster struct {
	clusterID string
	endpoint  string
	members   []liveMember
}

type liveMember struct {
	name     string // empty for a member added by replace, not started
	peerURLs []string
	// started: the member has published its client URLs, which it does
	// once it has run; a member of the initial list that has not started
	// yet has a name but none.
	started bool
}

// pairs are the cluster's members as sorted name=peer_url pairs, an
// unstarted member's name written "(not started)".
func (l *liveCluster) pairs() []string {
	var out []string
	for _, m := range l.members {
		name := m.name
		if name == "" {
			name = "(not started)"
		}
		for _, u := range m.peerURLs {
			out = append(out, name+"="+u)
		}
	}
	slices.Sort(out)
	return out
}

// ClientTLS is the client side of files: their certificate as a client
// certificate and their CA for the server; nil files give nil (plaintext).
func ClientTLS(files *TLSFiles) (*tls.Config, error) {
	if files == nil {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: files.CertFile, KeyFile: files.KeyFile, TrustedCAFile: files.CAFile}
	c, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("fleetstore: client tls (cert %q, key %q, ca %q): %w", files.CertFile, files.KeyFile, files.CAFile, err)
	}
	return c, nil
}

// probe asks the other members, within o.Probe, for their cluster's
// member list: nil when none answers (no cluster runs, or none is
// reachable: a first bootstrap, or every member restarting). A list that
// differs from the configured one is refused here, naming both.
func probe(ctx context.Context, o Options) (*liveCluster, error) {
	var eps []string
	for _, m := range o.Members {
		if m.Name != o.Name {
			eps = append(eps, m.ClientURL)
		}
	}
	if len(eps) == 0 {
		return nil, nil
	}
	tc, err := ClientTLS(o.TLS)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tc, Logger: zap.NewNop(), DialTimeout: o.Probe})
	if err != nil {
		return nil, nil // nothing reachable to ask
	}
	defer cli.Close()
	pctx, cancel := context.WithTimeout(ctx, o.Probe)
	defer cancel()
	resp, err := cli.MemberList(pctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrStopped, ctx.Err())
		}
		return nil, nil
	}
	live := &liveCluster{clusterID: fmt.Sprintf("%x", resp.Header.ClusterId), endpoint: strings.Join(redact.URLs(eps), ", ")}
	for _, m := range resp.Members {
		live.members = append(live.members, liveMember{name: m.Name, peerURLs: m.PeerURLs, started: len(m.ClientURLs) > 0})
	}
	if want := listOf(o.Members); !sameMembers(live.pairs(), want) {
		return nil, fmt.Errorf("%w: the configured members [%s] differ from the members [%s] of the running cluster %s (asked %s); nothing was written: make every file's lease_store.members the cluster's, or change the cluster with `leasebridge store replace`",
			ErrMismatch, strings.Join(want, " "), strings.Join(live.pairs(), " "), live.clusterID, live.endpoint)
	}
	return live, nil
}
