package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leasebridge/leasebridge/lease"
)

// Fleet rows (docs/lease-protocol.md, fleet rows) are Leases of the
// fleet too, one per node row and per standing request, named
// "<fleet>.<kind>.<name>" (three labels, where a session row has two),
// labelled with their kind, the value as JSON in AnnotationValue. A
// cleared request keeps its Lease with no value and no holder: the
// store's Role has no delete.
const (
	AnnotationValue = "leasebridge.io/value"
	// AnnotationTTL is a handover request's lapse time in integer
	// nanoseconds.
	AnnotationTTL = "leasebridge.io/ttl-ns"
	kindNode      = "node"
	kindHandover  = "handover"
	kindDrain     = "drain"
)

// watchRestart is how long a broken watch waits before it starts again.
const watchRestart = 100 * time.Millisecond

// revisionTimeout bounds the read that starts a watch when the store has
// no CallTimeout: a watch set up while the API server is down starts
// late.
const revisionTimeout = 2 * time.Second

var _ lease.Fleet = (*Store)(nil)

// fleetRowName is the Lease name of a fleet row of kind for name (a node
// or a session).
func (s *Store) fleetRowName(kind, name string) string {
	return s.fleet + "." + kind + "." + keyLabel(name)
}

// putValue writes v as the value of the fleet row kind/name, creating its
// Lease when there is none; holder and ttl fill its spec (kubectl shows
// them). It is unconditional, like an etcd put.
func (s *Store) putValue(ctx context.Context, kind, name string, v any, holder string, ttl time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	lname := s.fleetRowName(kind, name)
	val, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("kubestore: encode %s %q: %w", kind, name, err)
	}
	str := func(x string) *string { return &x }
	now := metav1.NewMicroTime(time.Now())
	spec := leaseSpec{RenewTime: &now}
	if holder != "" {
		spec.HolderIdentity = &holder
	}
	if ttl > 0 {
		d := int32(min(math.Ceil(ttl.Seconds()), math.MaxInt32))
		spec.LeaseDurationSeconds = &d
	}
	ann := map[string]*string{AnnotationKey: str(name), AnnotationKeyPrefix: str(s.prefix), AnnotationValue: str(string(val)),
		AnnotationTTL: str(strconv.FormatInt(int64(ttl), 10))}
	what := fmt.Sprintf("write %s %q (Lease %s/%s)", kind, name, s.ns, lname)
	for range 2 {
		err = s.patchAny(ctx, lname, ann, spec)
		if !apierrors.IsNotFound(err) {
			break
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lname, Namespace: s.ns,
			Labels: map[string]string{LabelFleet: s.fleet, LabelKind: kind}, Annotations: map[string]string{}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: spec.HolderIdentity, LeaseDurationSeconds: spec.LeaseDurationSeconds, RenewTime: &now}}
		for k, v := range ann {
			l.Annotations[k] = *v
		}
		err = s.request(s.rc.Post()).Body(l).Do(ctx).Error()
		if !apierrors.IsAlreadyExists(err) {
			break
		}
	}
	if err != nil {
		return readErr(what, err)
	}
	return nil
}

// patchAny merge-patches annotations and spec of Lease name with no
// precondition.
func (s *Store) patchAny(ctx context.Context, name string, ann map[string]*string, spec leaseSpec) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": spec})
	if err != nil {
		return err
	}
	return s.request(s.rc.Patch(types.MergePatchType)).Name(name).Body(body).Do(ctx).Error()
}

// clearValue removes the value of Lease l (at its version: a newer value
// written since stays); a conflict is not an error.
func (s *Store) clearValue(ctx context.Context, l *coordinationv1.Lease) error {
	v, err := version(l)
	if err != nil {
		return err
	}
	now := metav1.NewMicroTime(time.Now())
	_, err = s.patch(ctx, l.Name, v, map[string]*string{AnnotationValue: nil}, leaseSpec{RenewTime: &now},
		fmt.Sprintf("clear Lease %s/%s", s.ns, l.Name))
	if errors.Is(err, lease.ErrConflict) {
		return nil
	}
	return err
}

// values lists the fleet rows of kind and calls each with the name and
// value of every row that has one.
func (s *Store) values(ctx context.Context, kind string, each func(l *coordinationv1.Lease, name string, val []byte) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ls, err := s.list(ctx, s.fleet, kind)
	if err != nil {
		return err
	}
	for i := range ls.Items {
		l := &ls.Items[i]
		val := l.Annotations[AnnotationValue]
		if val == "" || l.Annotations[AnnotationKeyPrefix] != s.prefix {
			continue
		}
		if err := each(l, l.Annotations[AnnotationKey], []byte(val)); err != nil {
			return fmt.Errorf("kubestore: Lease %s/%s holds %s %q: %w", s.ns, l.Name, AnnotationValue, val, err)
		}
	}
	return nil
}

// PutNode implements lease.Fleet: the node's Lease names the process as
// its holder and the node row's TTL as its duration.
func (s *Store) PutNode(ctx context.Context, n lease.NodeRow) error {
	return s.putValue(ctx, kindNode, n.Node, n, n.Owner, n.TTL)
}

// Nodes implements lease.Fleet with one LIST.
func (s *Store) Nodes(ctx context.Context) (map[string]lease.NodeRow, error) {
	out := map[string]lease.NodeRow{}
	err := s.values(ctx, kindNode, func(_ *coordinationv1.Lease, name string, val []byte) error {
		var n lease.NodeRow
		if err := json.Unmarshal(val, &n); err != nil {
			return err
		}
		out[name] = n
		return nil
	})
	return out, err
}

// Rows implements lease.Fleet with one LIST of the fleet's rows; a key
// with no Lease is a row that does not exist.
func (s *Store) Rows(ctx context.Context, keys []string) (map[string]lease.VersionedRow, error) {
	all, err := s.ReadPrefix(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]lease.VersionedRow, len(keys))
	for _, k := range keys {
		r := all[k]
		if r.Err != nil {
			return nil, r.Err
		}
		out[k] = lease.VersionedRow{Row: r.Row, Version: r.Version}
	}
	return out, nil
}

// Control implements lease.Fleet. A handover request lapses by
// observation, as a row does: once this process has seen its Lease at one
// version for the request's ttl, it is no longer standing.
func (s *Store) Control(ctx context.Context) (lease.Control, error) {
	c := lease.Control{Handovers: map[string]lease.HandoverRequest{}, Draining: map[string]bool{}}
	err := s.values(ctx, kindHandover, func(l *coordinationv1.Lease, name string, val []byte) error {
		var h lease.HandoverRequest
		if err := json.Unmarshal(val, &h); err != nil {
			return err
		}
		ttl, _ := strconv.ParseInt(l.Annotations[AnnotationTTL], 10, 64)
		if !s.lapsed(l, time.Duration(ttl)) {
			c.Handovers[name] = h
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	err = s.values(ctx, kindDrain, func(_ *coordinationv1.Lease, name string, _ []byte) error {
		c.Draining[name] = true
		return nil
	})
	return c, err
}

// lapsed reports whether this process has seen l at its current version
// for ttl (0: never lapses).
func (s *Store) lapsed(l *coordinationv1.Lease, ttl time.Duration) bool {
	v, err := version(l)
	if err != nil || ttl <= 0 {
		return false
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.obs[l.Name]
	if !ok || o.version != v {
		s.obs[l.Name] = observed{version: v, since: now}
		return false
	}
	return now.Sub(o.since) >= ttl
}

// RequestHandover implements lease.Fleet.
func (s *Store) RequestHandover(ctx context.Context, h lease.HandoverRequest, ttl time.Duration) error {
	return s.putValue(ctx, kindHandover, h.Session, h, h.To, ttl)
}

// ClearHandover implements lease.Fleet: it clears the request only while
// it still names epoch, so a newer request survives.
func (s *Store) ClearHandover(ctx context.Context, session string, epoch uint64) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readFleetRow(ctx, kindHandover, session)
	if l == nil || err != nil {
		return err
	}
	var h lease.HandoverRequest
	if err := json.Unmarshal([]byte(l.Annotations[AnnotationValue]), &h); err != nil || h.Epoch != epoch {
		return nil // cleared or another request: not ours to clear
	}
	return s.clearValue(ctx, l)
}

// SetDrain implements lease.Fleet.
func (s *Store) SetDrain(ctx context.Context, node string, draining bool) error {
	if draining {
		return s.putValue(ctx, kindDrain, node, map[string]any{"node": node, "requested_at_unix_ns": time.Now().UnixNano()}, "", 0)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readFleetRow(ctx, kindDrain, node)
	if l == nil || err != nil {
		return err
	}
	return s.clearValue(ctx, l)
}

// readFleetRow reads the fleet row of kind for key; a row that does not
// exist is nil with no error (nothing to clear).
func (s *Store) readFleetRow(ctx context.Context, kind, key string) (*coordinationv1.Lease, error) {
	name := s.fleetRowName(kind, key)
	var l coordinationv1.Lease
	err := s.request(s.rc.Get()).Name(name).Do(ctx).Into(&l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, readErr(fmt.Sprintf("read Lease %s/%s", s.ns, name), err)
	}
	return &l, nil
}

// WatchControl implements lease.Fleet with a watch of the fleet's
// handover and drain Leases.
func (s *Store) WatchControl(ctx context.Context) <-chan struct{} {
	return s.watch(ctx, metav1.ListOptions{LabelSelector: LabelFleet + "=" + s.fleet + "," + LabelKind + " in (" + kindHandover + "," + kindDrain + ")"})
}

// WatchRow implements lease.Fleet with a watch of the session's Lease.
func (s *Store) WatchRow(ctx context.Context, key string) <-chan struct{} {
	return s.watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rowName(s.fleet, key)})
}

// watch signals every change of the Leases opts selects, coalesced, from
// the resourceVersion of a LIST made before it returns, so no change after
// the call is missed. A broken watch is started again and signals once,
// since changes may have been missed meanwhile.
func (s *Store) watch(ctx context.Context, opts metav1.ListOptions) <-chan struct{} {
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	rv := s.listVersion(ctx, opts)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			o := opts
			o.ResourceVersion, o.AllowWatchBookmarks = rv, false
			o.Watch = true
			w, err := s.request(s.rc.Get()).VersionedParams(&o, parameterCodec).Watch(ctx)
			if err == nil {
				for ev := range w.ResultChan() {
					if ev.Type == watch.Error {
						break
					}
					signal()
				}
				w.Stop()
			}
			signal()
			select {
			case <-ctx.Done():
			case <-time.After(watchRestart):
			}
			rv = s.listVersion(ctx, opts)
		}
	}()
	return out
}

// listVersion is the resourceVersion of a LIST of opts, or "" when it
// cannot be read (the watch then starts from whenever it is set up).
func (s *Store) listVersion(ctx context.Context, opts metav1.ListOptions) string {
	t := s.timeout
	if t <= 0 {
		t = revisionTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	var l coordinationv1.LeaseList
	err := s.request(s.rc.Get()).VersionedParams(&opts, parameterCodec).Do(ctx).Into(&l)
	if err != nil {
		return ""
	}
	return l.ResourceVersion
}
