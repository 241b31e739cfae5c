// Package etcdstore is the etcd implementation of lease.Store, and the
// only package of leasebridge that imports the etcd client. A session's
// row lives at KeyPrefix + session id as the JSON of lease.Row ({owner,
// node, epoch, timing}, durations in integer nanoseconds); its
// version is the key's ModRevision. Every read is linearizable, every
// write is a transaction comparing the ModRevision, and every call is
// bounded by its context and by CallTimeout.
package etcdstore

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/lease"
)

// Config locates and authenticates to the etcd cluster.
type Config struct {
	Endpoints   []string
	DialTimeout time.Duration
	// CertFile and KeyFile are the client certificate; CAFile verifies
	// the server. Setting any of them turns TLS on.
	CertFile, KeyFile, CAFile string
	// Username and Password enable etcd authentication when Username is
	// set.
	Username, Password string
	// KeyPrefix is prepended to every session id.
	KeyPrefix string
	// CallTimeout bounds every call in addition to its context; it is the
	// session's renew_call_timeout. Zero leaves the bound to the context.
	CallTimeout time.Duration
	// MaxTxnOps is the cluster's --max-txn-ops; zero means etcd's default,
	// DefaultMaxTxnOps. A batch of renewals carries one row fewer per Txn.
	// A server that refuses a Txn as too large makes the store halve it,
	// so a wrong value costs one refused request, not a failed renewal.
	MaxTxnOps int
}

// Sentinel errors.
var (
	// ErrConfig reports an unusable store configuration.
	ErrConfig = errors.New("lease: invalid etcd store config")
	// ErrAuth reports a store that refused the configured user name and
	// password: a configuration mistake, not an outage.
	ErrAuth = errors.New("etcdstore: the lease store refused the credentials")
)

// Store is a lease.Store on etcd.
type Store struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration

	cmu    sync.Mutex
	leases map[int64]*claimLease // by TTL in seconds, see claimLeaseOf

	maxTxnOps  int
	txns       atomic.Int64
	bmu        sync.Mutex
	rowsPerTxn int // rows per batch Txn, see batchRows
}

var (
	_ lease.Store        = (*Store)(nil)
	_ lease.PrefixReader = (*Store)(nil)
)

// New connects to etcd. With authentication it fetches a token, which
// blocks until ctx or DialTimeout ends; without, it returns at once and
// connects in the background, so a bridge can start while etcd is down.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrConfig)
	}
	var tlsCfg *tls.Config
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
		info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("%w: tls (cert %q, key %q, ca %q): %w", ErrConfig, cfg.CertFile, cfg.KeyFile, cfg.CAFile, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         tlsCfg,
		Username:    cfg.Username,
		Password:    cfg.Password,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
		DialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(sendCodec{}))},
	})
	if err != nil {
		if e := rpctypes.Error(err); e == rpctypes.ErrAuthFailed || e == rpctypes.ErrPermissionDenied {
			return nil, fmt.Errorf("%w: user %q at %v: %w", ErrAuth, cfg.Username, redact.URLs(cfg.Endpoints), err)
		}
		return nil, fmt.Errorf("%w: connect to %v: %w", lease.ErrUnavailable, redact.URLs(cfg.Endpoints), err)
	}
	return &Store{cli: cli, prefix: cfg.KeyPrefix, timeout: cfg.CallTimeout, maxTxnOps: cfg.MaxTxnOps}, nil
}

// Close stops keeping the claims' etcd leases alive (claims not released
// lapse with them) and closes the client.
func (s *Store) Close() error {
	s.cmu.Lock()
	for ttl, l := range s.leases {
		l.stop()
		delete(s.leases, ttl)
	}
	s.cmu.Unlock()
	return s.cli.Close()
}

func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return context.WithCancel(ctx)
}

// Read implements lease.Store with a linearizable read.
func (s *Store) Read(ctx context.Context, key string) (lease.Row, int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k := s.prefix + key
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return lease.Row{}, 0, fmt.Errorf("%w: read %q: %w", lease.ErrUnavailable, k, err)
	}
	if len(resp.Kvs) == 0 {
		return lease.Row{}, 0, nil
	}
	row, err := decodeRow(resp.Kvs[0])
	if err != nil {
		return lease.Row{}, 0, err
	}
	return row, resp.Kvs[0].ModRevision, nil
}

// decodeRow decodes the lease row kv holds.
func decodeRow(kv *mvccpb.KeyValue) (lease.Row, error) {
	var row lease.Row
	if err := json.Unmarshal(kv.Value, &row); err != nil {
		return lease.Row{}, fmt.Errorf("etcdstore: key %q holds %q, not a lease row: %w", kv.Key, kv.Value, err)
	}
	return row, nil
}

// healthKey is the key Ping counts; no row lives there.
const healthKey = "\x00health"

// Ping implements lease.Pinger with a linearizable count-only read of one
// key: the leader confirms its read index, so an answer means a quorum is
// reachable, and the reply carries no row.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.cli.Get(ctx, s.prefix+healthKey, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("%w: ping: %w", lease.ErrUnavailable, err)
	}
	return nil
}

// ReadPrefix implements lease.PrefixReader with one linearizable Range
// over KeyPrefix + prefix. Keys come back without KeyPrefix; a value that
// is not a lease row (another tool's key under the prefix) carries its
// decoding error.
func (s *Store) ReadPrefix(ctx context.Context, prefix string) (map[string]lease.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	p := s.prefix + prefix
	resp, err := s.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("%w: read prefix %q: %w", lease.ErrUnavailable, p, err)
	}
	out := make(map[string]lease.Result, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		row, err := decodeRow(kv)
		rv := lease.Result{Row: row, Version: kv.ModRevision}
		if err != nil {
			rv = lease.Result{Err: err}
		}
		out[strings.TrimPrefix(string(kv.Key), s.prefix)] = rv
	}
	return out, nil
}

// ReadAuthoritative implements lease.Store. etcd's default read is
// linearizable: it goes through the leader's read index, so it sees every
// write that landed before it, acknowledged or not.
func (s *Store) ReadAuthoritative(ctx context.Context, key string) (lease.Row, int64, error) {
	return s.Read(ctx, key)
}

// CompareAndSwap implements lease.Store as one transaction on the key's
// ModRevision (0: the key must not exist).
func (s *Store) CompareAndSwap(ctx context.Context, key string, expect int64, row lease.Row) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k := s.prefix + key
	row.RenewedAt = time.Now().UnixNano()
	val, err := json.Marshal(row)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: encode row for %q: %w", k, err)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", expect)).
		Then(clientv3.OpPut(k, string(val))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("%w: compare-and-swap %q at revision %d to %s: %w", lease.ErrUnavailable, k, expect, val, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: key %q is no longer at revision %d", lease.ErrConflict, k, expect)
	}
	// The transaction's only write carries the header's revision.
	return resp.Header.Revision, nil
}

// Release implements lease.Store.
func (s *Store) Release(ctx context.Context, key string, expect int64, row lease.Row) error {
	row.Owner, row.Node = "", ""
	_, err := s.CompareAndSwap(ctx, key, expect, row)
	return err
}
