// Package kubestore is the Kubernetes implementation of lease.Store: each
// session's row is a coordination.k8s.io/v1 Lease object in one namespace,
// written through the API server with resourceVersion preconditions, so a
// sidecar in a cluster needs no etcd of its own, only a Role on leases
// (examples/kubernetes/lease-rbac.yaml).
//
// # Encoding
//
// The Lease's spec carries what `kubectl get leases` and client-go's
// leaderelection read, filled truthfully: holderIdentity is the row's
// owner (absent when released), leaseDurationSeconds the owner's lease_ttl
// rounded up to whole seconds, acquireTime when the holder last changed,
// renewTime the writer's clock at the write, leaseTransitions how often
// the holder changed. The project's own fields live in annotations:
//
//	leasebridge.io/key         the session id (the store's key)
//	leasebridge.io/key-prefix  the fleet's lease_store.key_prefix
//	leasebridge.io/node        the owner's node name
//	leasebridge.io/epoch       the fencing epoch, decimal
//	leasebridge.io/timing      lease.RowTiming as JSON (integer nanoseconds)
//	leasebridge.io/release     lease.Release as JSON, on a released row
//
// and the labels leasebridge.io/fleet (a name derived from key_prefix) and
// leasebridge.io/kind (row or claim) let a standby read every row of its
// fleet with one LIST.
//
// # Version
//
// A row's version is its Lease's metadata.resourceVersion read as a
// decimal integer. The API calls resourceVersion opaque; every API server
// backed by etcd (all of them) sets it to the etcd revision of the
// object's last write, which is a positive integer that grows with every
// write, so it meets lease.Store's contract (strictly increasing per key,
// never 0). A resourceVersion that does not parse as one is refused with
// ErrVersion rather than guessed at. The version is only ever handed back
// to the API server as a precondition, never compared across keys.
//
// # Calls
//
// Reads are GETs and LISTs without a resourceVersion, which the API
// server answers from a quorum read of etcd (linearizable). The first
// write of a row is a create; every later write is a JSON merge patch
// carrying the expected resourceVersion, which the API server refuses
// with 409 Conflict when it changed; a patch of a deleted Lease is 404 and
// never recreates it (an update with a stale resourceVersion would). 409
// and 404 on a write are lease.ErrConflict: nothing was written. Every
// other failure (410, 429, 5xx, a timeout, a lost connection) is
// lease.ErrUnavailable: the write may have landed, and the manager
// resolves it with ReadAuthoritative. client-go's rate limiter is off and
// its retries are off: a renewal is never queued behind others, and every
// call is one request bounded by its context and CallTimeout.
package kubestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasebridge/leasebridge/lease"
)

// Annotation and label keys of the encoding (see the package comment).
const (
	AnnotationKey       = "leasebridge.io/key"
	AnnotationKeyPrefix = "leasebridge.io/key-prefix"
	AnnotationNode      = "leasebridge.io/node"
	AnnotationEpoch     = "leasebridge.io/epoch"
	AnnotationTiming    = "leasebridge.io/timing"
	AnnotationRelease   = "leasebridge.io/release"
	LabelFleet          = "leasebridge.io/fleet"
	LabelKind           = "leasebridge.io/kind"
	kindRow             = "row"
	kindClaim           = "claim"
)

// Config locates the API server and the namespace of the Lease objects.
type Config struct {
	// Namespace holds the Lease objects; empty: the service account's
	// namespace in a pod, else the kubeconfig context's, else "default".
	Namespace string
	// Kubeconfig is a kubeconfig file; empty: the pod's service account
	// (in-cluster configuration).
	Kubeconfig string
	// KeyPrefix is the fleet's lease_store.key_prefix: it names the fleet's
	// Lease objects and their leasebridge.io/fleet label.
	KeyPrefix string
	// CallTimeout bounds every call in addition to its context; it is the
	// session's renew_call_timeout. Zero leaves the bound to the context.
	CallTimeout time.Duration
}

// Sentinel errors.
var (
	// ErrConfig reports a configuration the client cannot be built from.
	ErrConfig = errors.New("kubestore: invalid Kubernetes lease store config")
	// ErrForbidden reports a request the API server refused to authorize
	// or authenticate: the Role or the credentials, not an outage.
	ErrForbidden = errors.New("kubestore: the API server refused the request")
	// ErrVersion reports a resourceVersion that is not a positive decimal
	// integer, which this store cannot use as a row version.
	ErrVersion = errors.New("kubestore: resourceVersion is not a positive integer")
	// ErrNotRow reports a Lease that does not hold a lease row of this
	// store (another tool's Lease under the same name, or a hash collision).
	ErrNotRow = errors.New("kubestore: Lease object is not a leasebridge row")
)

// Store is a lease.Store on Kubernetes Lease objects.
type Store struct {
	rc      rest.Interface // coordination.k8s.io/v1
	authz   rest.Interface // authorization.k8s.io/v1
	http    *http.Client
	host    string
	ns      string
	prefix  string
	fleet   string
	timeout time.Duration

	mu   sync.Mutex
	seen map[string]seenLease // by Lease name: the spec fields a write keeps
	obs  map[string]observed  // by Lease name: claim holders' rows, see claims.go
}

// seenLease is what the store last read or wrote of a Lease: a write at
// that resourceVersion keeps its acquireTime and leaseTransitions unless
// the holder changes.
type seenLease struct {
	version     int64
	holder      string
	acquired    *metav1.MicroTime
	transitions int32
}

var (
	_ lease.Store        = (*Store)(nil)
	_ lease.PrefixReader = (*Store)(nil)
	_ lease.Pinger       = (*Store)(nil)
)

// New builds the client; it connects on the first call, so a bridge can
// start while the API server is down.
func New(cfg Config) (*Store, error) {
	rc, ns, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	cl, err := newClients(rc)
	if err != nil {
		return nil, err
	}
	return &Store{rc: cl.leases, authz: cl.authz, http: cl.http, host: rc.Host, ns: ns, prefix: cfg.KeyPrefix,
		fleet: fleetName(cfg.KeyPrefix), timeout: cfg.CallTimeout,
		seen: map[string]seenLease{}, obs: map[string]observed{}}, nil
}

// Host is the API server's URL, for log lines.
func (s *Store) Host() string { return s.host }

// Namespace is the namespace the store's Lease objects live in.
func (s *Store) Namespace() string { return s.ns }

// Close drops the client's idle connections.
func (s *Store) Close() error {
	s.http.CloseIdleConnections()
	return nil
}

// restConfig is the client configuration of cfg, with the settings the
// protocol needs, and the namespace to use.
func restConfig(cfg Config) (*rest.Config, string, error) {
	var rc *rest.Config
	ns := cfg.Namespace
	if cfg.Kubeconfig == "" {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, "", fmt.Errorf("%w: no kubeconfig set and not in a pod: %w", ErrConfig, err)
		}
		if ns == "" {
			b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
			if err != nil {
				return nil, "", fmt.Errorf("%w: namespace not set and the service account's is unreadable: %w", ErrConfig, err)
			}
			ns = strings.TrimSpace(string(b))
		}
	} else {
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{})
		var err error
		if rc, err = cc.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("%w: kubeconfig %q: %w", ErrConfig, cfg.Kubeconfig, err)
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, "", fmt.Errorf("%w: kubeconfig %q: namespace: %w", ErrConfig, cfg.Kubeconfig, err)
			}
		}
	}
	// A negative QPS leaves client-go without a rate limiter: a renewal
	// must never wait for a token behind other sessions' calls.
	rc.QPS, rc.Burst = -1, 0
	rc.WarningHandler = rest.NoWarnings{}
	// HTTP/1.1: a call cancelled at its deadline closes its own
	// connection, and the next call dials afresh. Over HTTP/2 every call
	// would queue on the one connection of a dead path until client-go's
	// ping notices it, tens of seconds later.
	rc.NextProtos = []string{"http/1.1"}
	rc.UserAgent = "leasebridge"
	return rc, ns, nil
}

// bound adds CallTimeout to ctx.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return context.WithCancel(ctx)
}

// request is one call on the namespace's leases, never retried by
// client-go (the manager decides what a failure means).
func (s *Store) request(r *rest.Request) *rest.Request {
	return r.Namespace(s.ns).Resource("leases").MaxRetries(0)
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// fleetName is the leasebridge.io/fleet label of key_prefix and the first
// part of its rows' Lease names: for a key_prefix "/<name>/" whose name is
// a lowercase DNS label of at most 40 characters, that name
// ("/leasebridge/" is "leasebridge"); for any other, "lb-" and a hash of
// it. Distinct prefixes get distinct names unless the hashes collide, and
// the annotations catch that.
func fleetName(keyPrefix string) string {
	n := strings.TrimSuffix(strings.TrimPrefix(keyPrefix, "/"), "/")
	if keyPrefix == "/"+n+"/" && len(n) <= 40 && dnsLabel.MatchString(n) {
		return n
	}
	return "lb-" + shortHash(keyPrefix)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:5])
}

// rowName is the Lease name of session key: "<fleet>.<key>" when key is a
// lowercase DNS label (at most 63 characters), else "<fleet>.<the first
// 40 characters of key lowercased, other characters as '-'>-<hash>"; the
// annotations name the key, so a collision is detected (ErrNotRow), never
// mistaken for the row.
func rowName(fleet, key string) string { return fleet + "." + keyLabel(key) }

// keyLabel is the DNS label of key in a Lease name (see rowName).
func keyLabel(key string) string {
	if len(key) <= 63 && dnsLabel.MatchString(key) {
		return key
	}
	b := []byte(strings.ToLower(key[:min(len(key), 40)]))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	part := strings.Trim(string(b), "-")
	if part == "" {
		part = "s"
	}
	return part + "-" + shortHash(key)
}

// version parses a resourceVersion (see the package comment).
func version(l *coordinationv1.Lease) (int64, error) {
	v, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: Lease %q has %q", ErrVersion, l.Name, l.ResourceVersion)
	}
	return v, nil
}

// seenOf is what a write at version v of l keeps of it.
func seenOf(l *coordinationv1.Lease, v int64) seenLease {
	sl := seenLease{version: v, acquired: l.Spec.AcquireTime}
	if l.Spec.HolderIdentity != nil {
		sl.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		sl.transitions = *l.Spec.LeaseTransitions
	}
	return sl
}

// remember records l's spec fields for the next write at its version.
func (s *Store) remember(l *coordinationv1.Lease, v int64) {
	s.mu.Lock()
	s.seen[l.Name] = seenOf(l, v)
	s.mu.Unlock()
}

// decodeRow is the row l holds for key, and its version.
func (s *Store) decodeRow(l *coordinationv1.Lease, key string) (lease.Row, int64, error) {
	a := l.Annotations
	if a[AnnotationKey] != key || a[AnnotationKeyPrefix] != s.prefix {
		return lease.Row{}, 0, fmt.Errorf("%w: Lease %q names key %q of key_prefix %q, not %q of %q",
			ErrNotRow, l.Name, a[AnnotationKey], a[AnnotationKeyPrefix], key, s.prefix)
	}
	v, err := version(l)
	if err != nil {
		return lease.Row{}, 0, err
	}
	row := lease.Row{Node: a[AnnotationNode]}
	if l.Spec.HolderIdentity != nil {
		row.Owner = *l.Spec.HolderIdentity
	}
	if row.Epoch, err = strconv.ParseUint(a[AnnotationEpoch], 10, 64); err != nil {
		return lease.Row{}, 0, fmt.Errorf("%w: Lease %q: %s %q: %w", ErrNotRow, l.Name, AnnotationEpoch, a[AnnotationEpoch], err)
	}
	if t := a[AnnotationTiming]; t != "" {
		if err := json.Unmarshal([]byte(t), &row.Timing); err != nil {
			return lease.Row{}, 0, fmt.Errorf("%w: Lease %q: %s %q: %w", ErrNotRow, l.Name, AnnotationTiming, t, err)
		}
	}
	if r := a[AnnotationRelease]; r != "" {
		row.Release = new(lease.Release)
		if err := json.Unmarshal([]byte(r), row.Release); err != nil {
			return lease.Row{}, 0, fmt.Errorf("%w: Lease %q: %s %q: %w", ErrNotRow, l.Name, AnnotationRelease, r, err)
		}
	}
	if l.Spec.RenewTime != nil {
		row.RenewedAt = l.Spec.RenewTime.UnixNano()
	}
	s.remember(l, v)
	return row, v, nil
}

// readErr maps a failed call: refused access is ErrForbidden, anything
// else the store being unavailable. Both wrap lease.ErrUnavailable, so
// the manager treats them alike.
func readErr(what string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return fmt.Errorf("%w: %w: %s: %w", lease.ErrUnavailable, ErrForbidden, what, err)
	}
	return fmt.Errorf("%w: %s: %w", lease.ErrUnavailable, what, err)
}

// Read implements lease.Store with a GET, which the API server answers
// from a quorum read.
func (s *Store) Read(ctx context.Context, key string) (lease.Row, int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	name := rowName(s.fleet, key)
	var l coordinationv1.Lease
	err := s.request(s.rc.Get()).Name(name).Do(ctx).Into(&l)
	if apierrors.IsNotFound(err) {
		s.forget(name)
		return lease.Row{}, 0, nil
	}
	if err != nil {
		return lease.Row{}, 0, readErr(fmt.Sprintf("read Lease %s/%s (key %q)", s.ns, name, key), err)
	}
	return s.decodeRow(&l, key)
}

func (s *Store) forget(name string) {
	s.mu.Lock()
	delete(s.seen, name)
	s.mu.Unlock()
}

// ReadAuthoritative implements lease.Store: Read is already a quorum read.
func (s *Store) ReadAuthoritative(ctx context.Context, key string) (lease.Row, int64, error) {
	return s.Read(ctx, key)
}

// healthName is the Lease Ping reads; it is never created (row names have
// a dot after the fleet name, which has none).
func (s *Store) healthName() string { return s.fleet + "-health" }

// Ping implements lease.Pinger with a GET of a Lease that never exists:
// the 404 comes from a quorum read of etcd, so an answer means the API
// server and its etcd both work, and it carries no row.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := s.request(s.rc.Get()).Name(s.healthName()).Do(ctx).Error()
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return readErr(fmt.Sprintf("ping (GET Lease %s/%s)", s.ns, s.healthName()), err)
}

// list LISTs the namespace's Leases of this fleet of kind, without a
// resourceVersion (a consistent read).
func (s *Store) list(ctx context.Context, fleet, kind string) (*coordinationv1.LeaseList, error) {
	sel := LabelFleet + "=" + fleet + "," + LabelKind + "=" + kind
	var out coordinationv1.LeaseList
	err := s.request(s.rc.Get()).VersionedParams(&metav1.ListOptions{LabelSelector: sel}, parameterCodec).
		Do(ctx).Into(&out)
	if err != nil {
		return nil, readErr(fmt.Sprintf("list Leases %s/%s", s.ns, sel), err)
	}
	return &out, nil
}

// ReadPrefix implements lease.PrefixReader with one LIST of the fleet's
// row Leases by label; keys come from their leasebridge.io/key annotation.
func (s *Store) ReadPrefix(ctx context.Context, prefix string) (map[string]lease.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ls, err := s.list(ctx, s.fleet, kindRow)
	if err != nil {
		return nil, err
	}
	out := make(map[string]lease.Result, len(ls.Items))
	for i := range ls.Items {
		l := &ls.Items[i]
		key := l.Annotations[AnnotationKey]
		if !strings.HasPrefix(key, prefix) || l.Annotations[AnnotationKeyPrefix] != s.prefix {
			continue
		}
		row, v, err := s.decodeRow(l, key)
		if err != nil {
			out[key] = lease.Result{Err: err}
			continue
		}
		out[key] = lease.Result{Row: row, Version: v}
	}
	return out, nil
}

// CompareAndSwap implements lease.Store: a create when expect is 0, else a
// merge patch with resourceVersion expect.
func (s *Store) CompareAndSwap(ctx context.Context, key string, expect int64, row lease.Row) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	name := rowName(s.fleet, key)
	now := metav1.NewMicroTime(time.Now())
	if expect == 0 {
		l := s.newRow(name, key, row, now)
		return s.create(ctx, l, fmt.Sprintf("create Lease %s/%s (key %q)", s.ns, name, key))
	}
	prev, err := s.previous(ctx, name, key, expect)
	if err != nil {
		return 0, err
	}
	spec := specFor(row, prev, now)
	ann := rowAnnotations(key, s.prefix, row)
	if row.Release == nil {
		ann[AnnotationRelease] = nil // merge patch: delete it
	}
	return s.patch(ctx, name, expect, ann, spec, fmt.Sprintf("patch Lease %s/%s (key %q) at resourceVersion %d", s.ns, name, key, expect))
}

// previous is what the store knows of name at version expect, reading it
// when it knows nothing: a Lease no longer at expect is a conflict
// already (the read is a quorum read), and nothing is written.
func (s *Store) previous(ctx context.Context, name, key string, expect int64) (seenLease, error) {
	s.mu.Lock()
	prev, ok := s.seen[name]
	s.mu.Unlock()
	if ok && prev.version == expect {
		return prev, nil
	}
	_, v, err := s.Read(ctx, key)
	if err != nil {
		return seenLease{}, err
	}
	if v != expect {
		return seenLease{}, fmt.Errorf("%w: Lease %s/%s (key %q) is at resourceVersion %d, not %d", lease.ErrConflict, s.ns, name, key, v, expect)
	}
	s.mu.Lock()
	prev = s.seen[name]
	s.mu.Unlock()
	return prev, nil
}

// newRow is the Lease that first holds row.
func (s *Store) newRow(name, key string, row lease.Row, now metav1.MicroTime) *coordinationv1.Lease {
	spec := specFor(row, seenLease{}, now)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns,
			Labels:      map[string]string{LabelFleet: s.fleet, LabelKind: kindRow},
			Annotations: map[string]string{}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: spec.HolderIdentity, LeaseDurationSeconds: spec.LeaseDurationSeconds,
			AcquireTime: spec.AcquireTime, RenewTime: spec.RenewTime, LeaseTransitions: spec.LeaseTransitions},
	}
	for k, v := range rowAnnotations(key, s.prefix, row) {
		if v != nil {
			l.Annotations[k] = *v
		}
	}
	return l
}

// leaseSpec is the spec a write sets; a nil field of the merge patch
// clears the Lease's.
type leaseSpec struct {
	HolderIdentity       *string           `json:"holderIdentity"`
	LeaseDurationSeconds *int32            `json:"leaseDurationSeconds"`
	AcquireTime          *metav1.MicroTime `json:"acquireTime"`
	RenewTime            *metav1.MicroTime `json:"renewTime"`
	LeaseTransitions     *int32            `json:"leaseTransitions"`
}

// specFor fills the Lease spec of row truthfully: a holder change since
// prev restarts acquireTime and counts a transition, a released row has
// no holder and no duration.
func specFor(row lease.Row, prev seenLease, now metav1.MicroTime) leaseSpec {
	sp := leaseSpec{AcquireTime: prev.acquired, RenewTime: &now, LeaseTransitions: &prev.transitions}
	if row.Owner == "" {
		return sp
	}
	sp.HolderIdentity = &row.Owner
	if row.Owner != prev.holder {
		sp.AcquireTime = &now
		if prev.version != 0 {
			t := prev.transitions + 1
			sp.LeaseTransitions = &t
		}
	}
	if row.Timing.LeaseTTL > 0 {
		d := int32(min(math.Ceil(row.Timing.LeaseTTL.Seconds()), math.MaxInt32))
		sp.LeaseDurationSeconds = &d
	}
	return sp
}

// rowAnnotations are the annotations of row; nil values are deleted by a
// merge patch.
func rowAnnotations(key, prefix string, row lease.Row) map[string]*string {
	str := func(s string) *string { return &s }
	a := map[string]*string{
		AnnotationKey:       str(key),
		AnnotationKeyPrefix: str(prefix),
		AnnotationNode:      str(row.Node),
		AnnotationEpoch:     str(strconv.FormatUint(row.Epoch, 10)),
		AnnotationTiming:    nil,
	}
	if row.Timing != (lease.RowTiming{}) {
		b, _ := json.Marshal(row.Timing) // integers only: cannot fail
		a[AnnotationTiming] = str(string(b))
	}
	if row.Release != nil {
		b, _ := json.Marshal(row.Release)
		a[AnnotationRelease] = str(string(b))
	}
	return a
}

// create POSTs l; 409 AlreadyExists is a conflict.
func (s *Store) create(ctx context.Context, l *coordinationv1.Lease, what string) (int64, error) {
	var out coordinationv1.Lease
	err := s.request(s.rc.Post()).Body(l).Do(ctx).Into(&out)
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		return 0, fmt.Errorf("%w: %s: %w", lease.ErrConflict, what, err)
	}
	if err != nil {
		return 0, readErr(what, err)
	}
	return s.written(&out)
}

// patch sends a merge patch of annotations and spec with resourceVersion
// expect as its precondition; 409 (changed) and 404 (deleted) are
// conflicts.
func (s *Store) patch(ctx context.Context, name string, expect int64, ann map[string]*string, spec leaseSpec, what string) (int64, error) {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": strconv.FormatInt(expect, 10), "annotations": ann},
		"spec":     spec,
	})
	if err != nil {
		return 0, fmt.Errorf("kubestore: encode %s: %w", what, err)
	}
	var out coordinationv1.Lease
	err = s.request(s.rc.Patch(types.MergePatchType)).Name(name).Body(body).Do(ctx).Into(&out)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("%w: %s: %w", lease.ErrConflict, what, err)
	}
	if err != nil {
		return 0, readErr(what, err)
	}
	return s.written(&out)
}

// written is the version of a Lease the API server returned from a write.
func (s *Store) written(l *coordinationv1.Lease) (int64, error) {
	v, err := version(l)
	if err != nil {
		// Landed, but unusable: the manager reads it back and gets the
		// same error there.
		return 0, fmt.Errorf("%w: %w", lease.ErrUnavailable, err)
	}
	s.remember(l, v)
	return v, nil
}

// Release implements lease.Store.
func (s *Store) Release(ctx context.Context, key string, expect int64, row lease.Row) error {
	row.Owner, row.Node = "", ""
	_, err := s.CompareAndSwap(ctx, key, expect, row)
	return err
}
