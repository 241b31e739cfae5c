// Package etcdembed runs a single-member etcd inside the process: the lease
// store of a standalone node configured without endpoints, and of the demo.
// Its rows live in a data directory, so a restarted process keeps its
// sessions' epochs.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

// Sentinel errors.
var (
	// ErrNotReady reports that the embedded member did not become ready in
	// time, or that start-up was cancelled.
	ErrNotReady = errors.New("etcdembed: embedded etcd not ready")
	// ErrLocked reports a data directory another process is using.
	ErrLocked = errors.New("etcdembed: data directory in use by another process")
	// ErrDiskFull reports a disk with no space left (ENOSPC) under the
	// data directory.
	ErrDiskFull = errors.New("etcdembed: no space left on the disk of the data directory")
)

// The disk settings the member runs with; docs/operations.md derives the
// disk the embedded store needs from them.
const (
	// MaxWALFiles is how many WAL segments are kept; older ones are
	// removed after a snapshot.
	MaxWALFiles = embed.DefaultMaxWALs
	// MaxSnapFiles is how many snapshot files are kept.
	MaxSnapFiles = embed.DefaultMaxSnapshots
	// QuotaBytes is the backend database's quota (etcd's default): beyond
	// it etcd refuses writes, so every renew would fail.
	QuotaBytes int64 = 2 << 30
	// CompactionRetention is the number of revisions auto-compaction keeps
	// (every renew is a revision; nothing watches history).
	CompactionRetention = 10000
	// ReadyTimeout bounds the wait for the member to serve.
	ReadyTimeout = time.Minute
	// CloseTimeout bounds Close: a member that does not stop in time is
	// abandoned to the process exit.
	CloseTimeout = 5 * time.Second
)

// WALSegmentBytes is the size etcd preallocates for every WAL segment; one
// more segment than MaxWALFiles exists at times, preallocated ahead.
func WALSegmentBytes() int64 { return wal.SegmentSizeBytes }

// DiskNeed is the most disk the member's files take: MaxWALFiles plus one
// preallocated WAL segments and a backend at its quota (snapshots of a
// lease store are a few kilobytes).
func DiskNeed() int64 { return int64(MaxWALFiles+1)*WALSegmentBytes() + QuotaBytes }

// Options configure StartWith.
type Options struct {
	// Dir is the member's data directory; Dir + ".lock" is its lock file.
	Dir string
	// Logger receives etcd's warnings and errors; nil discards them.
	Logger *slog.Logger
	// OnFatal, when set, is called instead of etcd's own exit when the
	// running member hits an unrecoverable error (etcd logs it as fatal or
	// panics); it must not return, and should end the process. err wraps
	// ErrDiskFull when the disk is full.
	OnFatal func(err error)
}

// Server is a running embedded etcd member.
type Server struct {
	// Endpoints are the member's client URLs.
	Endpoints []string
	etcd      *embed.Etcd
	unlock    func()
	quiet     *atomic.Bool
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
// waits until it serves or ctx ends; etcd's own log is discarded.
func Start(ctx context.Context, dir string) (*Server, error) {
	return StartWith(ctx, Options{Dir: dir})
}

// StartWith runs a member as Start does, with o's logger and fatal
// handler. It takes the data directory's lock first, so a second process
// on the same directory fails at once with ErrLocked instead of waiting on
// etcd's database lock; it returns as soon as ctx ends, even while etcd is
// still starting.
func StartWith(ctx context.Context, o Options) (*Server, error) {
	dir := o.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, Classify(fmt.Errorf("etcdembed: create data directory %s: %w", dir, err), dir)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, Classify(err, dir)
	}
	warnFree(o.Logger, dir)
	quiet := new(atomic.Bool)
	cfg, endpoint, err := config(o, quiet)
	if err != nil {
		unlock()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// Ended already: starting etcd would only leave it running into a
		// directory its caller may remove.
		unlock()
		return nil, fmt.Errorf("%w: start in %s: %w", ErrNotReady, dir, err)
	}
	type started struct {
		e   *embed.Etcd
		err error
	}
	ch := make(chan started, 1)
	go func() {
		e, err := embed.StartEtcd(cfg)
		ch <- started{e, err}
	}()
	var r started
	select {
	case r = <-ch:
	case <-ctx.Done():
		// Close whatever starts, later; the lock goes with the process.
		go func() {
			if r := <-ch; r.e != nil {
				r.e.Close()
			}
			unlock()
		}()
		return nil, fmt.Errorf("%w: start in %s: %w", ErrNotReady, dir, ctx.Err())
	}
	if r.err != nil {
		unlock()
		return nil, Classify(fmt.Errorf("etcdembed: start in %s: %w", dir, r.err), dir)
	}
	s := &Server{Endpoints: []string{endpoint}, etcd: r.e, unlock: unlock, quiet: quiet}
	return s, s.waitReady(ctx, dir)
}

// waitReady waits until the member serves; on failure it closes it.
func (s *Server) waitReady(ctx context.Context, dir string) error {
	t := time.NewTimer(ReadyTimeout)
	defer t.Stop()
	var err error
	select {
	case <-s.etcd.Server.ReadyNotify():
		return nil
	case e := <-s.etcd.Err():
		err = Classify(fmt.Errorf("etcdembed: member in %s failed: %w", dir, e), dir)
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	case <-t.C:
		err = fmt.Errorf("%w after %s in %s", ErrNotReady, ReadyTimeout, dir)
	}
	s.Close()
	return err
}

// config is the member's configuration: loopback ports, short ticks (a
// single member elects itself), and the disk settings above.
func config(o Options, quiet *atomic.Bool) (*embed.Config, string, error) {
	cport, err := freePort()
	if err != nil {
		return nil, "", fmt.Errorf("etcdembed: client port: %w", err)
	}
	pport, err := freePort()
	if err != nil {
		return nil, "", fmt.Errorf("etcdembed: peer port: %w", err)
	}
	curl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cport)}
	purl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pport)}
	cfg := embed.NewConfig()
	cfg.Name = "leasebridge"
	cfg.Dir = o.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, purl.String())
	cfg.TickMs, cfg.ElectionMs = 10, 100
	SetDisk(cfg)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(o.Logger, o.Dir, o.OnFatal, quiet))
	return cfg, curl.String(), nil
}

// Close stops the member, waiting at most CloseTimeout, and releases the
// data directory's lock once it has stopped; calling it twice is safe
// (embed panics on that).
func (s *Server) Close() {
	s.once.Do(func() { Stop(s.etcd, s.unlock, s.quiet) })
}
