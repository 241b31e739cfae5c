// Package etcdembed runs a single-member etcd inside the process: the lease
// store of a standalone node configured without endpoints, and of the demo.
// Its rows live in a data directory, so a restarted process keeps its
// sessions' epochs.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNotReady reports that the embedded member did not become ready in time.
var ErrNotReady = errors.New("etcdembed: embedded etcd not ready")

// Server is a running embedded etcd member.
type Server struct {
	// Endpoints are the member's client URLs.
	Endpoints []string
	etcd      *embed.Etcd
	once      sync.Once
}

// freePort asks the kernel for a loopback port; etcd's initial cluster
// cannot name port 0.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs a member with its data in dir, listening on loopback only, and
// waits until it serves or ctx ends.
func Start(ctx context.Context, dir string) (*Server, error) {
	cport, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("etcdembed: client port: %w", err)
	}
	pport, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("etcdembed: peer port: %w", err)
	}
	curl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cport)}
	purl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pport)}
	cfg := embed.NewConfig()
	cfg.Name = "leasebridge"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, purl.String())
	// A single member elects itself; short ticks make start-up quick.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start in %s: %w", dir, err)
	}
	s := &Server{Endpoints: []string{curl.String()}, etcd: e}
	select {
	case <-e.Server.ReadyNotify():
		return s, nil
	case err := <-e.Err():
		s.Close()
		return nil, fmt.Errorf("etcdembed: member in %s failed: %w", dir, err)
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	case <-time.After(time.Minute):
		s.Close()
		return nil, fmt.Errorf("%w after 1m in %s", ErrNotReady, dir)
	}
}

// Close stops the member; calling it twice is safe (embed panics on that).
func (s *Server) Close() {
	s.once.Do(s.etcd.Close)
}
