package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasebridge/leasebridge/lease"
)

// Claim annotations: the endpoint identity and the claim (lease.Claim as
// JSON). A claim's Lease is named ClaimName(endpoint), the same for every
// fleet of the namespace, so fleets with different key prefixes see each
// other's claims; fleets in different namespaces do not (as fleets on
// different etcd clusters do not).
const (
	AnnotationEndpoint = "leasebridge.io/endpoint"
	AnnotationClaim    = "leasebridge.io/claim"
)

// ClaimName is the Lease name of an endpoint identity's claim.
func ClaimName(endpoint string) string { return "leasebridge-endpoint-" + shortHash(endpoint) }

var _ lease.Claimer = (*Store)(nil)

// claimAttempts bounds how often Claim starts over after another writer
// changed a claim between its read and its write.
const claimAttempts = 4

// observed is the version of a claim holder's session row and when this
// process first saw it at that version.
type observed struct {
	version int64
	since   time.Time
}

// heldClaim is a claim Lease as this call wrote it, for its release.
type heldClaim struct {
	name    string
	version int64
}

// Claim implements lease.Claimer. The API server has no TTL, so a claim
// lapses by observation instead, the way a row does: a claim is live
// while its holder still owns the session row it names and that row keeps
// changing (the holder renews it); once this process has seen the row at
// one version for the claim's leaseDurationSeconds (the holder's ttl,
// rounded up), or the row is released, gone or another owner's, the
// claim is dead and may be taken. So a claim costs no writes of its own
// while held. Claims are written one endpoint at a time; a conflict on
// any releases those this call wrote, so it is all or none.
func (s *Store) Claim(ctx context.Context, endpoints []string, c lease.Claim, ttl time.Duration) (func(context.Context) error, error) {
	if len(endpoints) == 0 {
		return func(context.Context) error { return nil }, nil
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	var held []heldClaim
	for _, ep := range endpoints {
		h, err := s.claimOne(bctx, ep, c, ttl)
		if err != nil {
			if len(held) > 0 {
				_ = s.releaseClaims(context.WithoutCancel(ctx), held, c)
			}
			return nil, err
		}
		held = append(held, h)
	}
	return func(ctx context.Context) error { return s.releaseClaims(ctx, held, c) }, nil
}

// claimOne writes c into the claim of ep, taking it over when it is free,
// dead, or c may take it (lease.Claim.Conflicts).
func (s *Store) claimOne(ctx context.Context, ep string, c lease.Claim, ttl time.Duration) (heldClaim, error) {
	name := ClaimName(ep)
	val, err := json.Marshal(c)
	if err != nil {
		return heldClaim{}, fmt.Errorf("kubestore: encode claim %+v: %w", c, err)
	}
	secs := int32(min(math.Ceil(max(ttl, time.Second).Seconds()), math.MaxInt32))
	for range claimAttempts {
		var l coordinationv1.Lease
		err := s.request(s.rc.Get()).Name(name).Do(ctx).Into(&l)
		what := fmt.Sprintf("claim %q (Lease %s/%s)", ep, s.ns, name)
		var v int64
		switch {
		case apierrors.IsNotFound(err):
			v, err = s.create(ctx, s.newClaim(name, ep, c, string(val), secs), what)
		case err != nil:
			return heldClaim{}, readErr(what, err)
		default:
			if cerr := s.mayTake(ctx, ep, &l, c); cerr != nil {
				return heldClaim{}, cerr
			}
			v, err = s.patchClaim(ctx, &l, c.Owner, string(val), secs, what)
		}
		if errors.Is(err, lease.ErrConflict) {
			continue
		}
		return heldClaim{name: name, version: v}, err
	}
	return heldClaim{}, fmt.Errorf("%w: claim %q: the claim kept changing over %d attempts", lease.ErrUnavailable, ep, claimAttempts)
}

// mayTake returns a *lease.ClaimConflict when l holds a live claim c may
// not take over, else nil.
func (s *Store) mayTake(ctx context.Context, ep string, l *coordinationv1.Lease, c lease.Claim) error {
	raw := l.Annotations[AnnotationClaim]
	if raw == "" || l.Spec.HolderIdentity == nil {
		return nil // released
	}
	var holder lease.Claim
	if err := json.Unmarshal([]byte(raw), &holder); err != nil {
		return fmt.Errorf("kubestore: Lease %s/%s holds %s %q, not an endpoint claim: %w", s.ns, l.Name, AnnotationClaim, raw, err)
	}
	if !c.Conflicts(holder) {
		return nil
	}
	ttl := time.Second
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		ttl = time.Duration(*d) * time.Second
	}
	live, err := s.claimLive(ctx, holder, ttl)
	if err != nil {
		return err
	}
	if live {
		return &lease.ClaimConflict{Endpoint: ep, Holder: holder}
	}
	return nil
}

// claimLive reports whether holder still owns its session row and the row
// has changed within ttl of this process's observation (see Claim).
func (s *Store) claimLive(ctx context.Context, holder lease.Claim, ttl time.Duration) (bool, error) {
	name := rowName(fleetName(holder.KeyPrefix), holder.Session)
	var l coordinationv1.Lease
	err := s.request(s.rc.Get()).Name(name).Do(ctx).Into(&l)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, readErr(fmt.Sprintf("read the claim holder's row (Lease %s/%s)", s.ns, name), err)
	}
	if l.Annotations[AnnotationKey] != holder.Session || l.Annotations[AnnotationKeyPrefix] != holder.KeyPrefix ||
		l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder.Owner {
		return false, nil
	}
	v, err := version(&l)
	if err != nil {
		return false, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.obs[name]
	if !ok || o.version != v {
		s.obs[name] = observed{version: v, since: now}
		return true, nil
	}
	return now.Sub(o.since) < ttl, nil
}

// newClaim is the Lease of a first claim on ep.
func (s *Store) newClaim(name, ep string, c lease.Claim, val string, secs int32) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	var zero int32
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns,
			Labels:      map[string]string{LabelKind: kindClaim},
			Annotations: map[string]string{AnnotationEndpoint: ep, AnnotationClaim: val}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &c.Owner, LeaseDurationSeconds: &secs,
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: &zero},
	}
}

// patchClaim writes c's claim over l at l's version; a release passes an
// empty owner and claim.
func (s *Store) patchClaim(ctx context.Context, l *coordinationv1.Lease, owner, val string, secs int32, what string) (int64, error) {
	v, err := version(l)
	if err != nil {
		return 0, err
	}
	prev := seenOf(l, v)
	now := metav1.NewMicroTime(time.Now())
	spec := specFor(lease.Row{Owner: owner}, prev, now)
	ann := map[string]*string{AnnotationClaim: nil}
	if owner != "" {
		spec.LeaseDurationSeconds = &secs
		ann[AnnotationClaim] = &val
	}
	return s.patch(ctx, l.Name, v, ann, spec, what)
}

// releaseClaims gives up the claims held, each only while it is still
// at the version this process wrote: one another owner of the session
// took over since is that owner's and stays.
func (s *Store) releaseClaims(ctx context.Context, held []heldClaim, c lease.Claim) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var errs []error
	for _, h := range held {
		var l coordinationv1.Lease
		err := s.request(s.rc.Get()).Name(h.name).Do(ctx).Into(&l)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, readErr("release claim Lease "+h.name, err))
			continue
		}
		if v, _ := version(&l); v != h.version {
			continue
		}
		if _, err := s.patchClaim(ctx, &l, "", "", 0, "release claim Lease "+h.name); err != nil && !errors.Is(err, lease.ErrConflict) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("release the claims of owner %s (they lapse once its row stops changing): %w", c.Owner, errors.Join(errs...))
	}
	return nil
}
