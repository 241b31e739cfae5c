package kubestore

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// Verbs are the verbs the store uses on leases (coordination.k8s.io) in
// its namespace, all a Role must grant (examples/kubernetes/lease-rbac.yaml):
// get (rows, claims, the health probe), list (standbys' bulk read, node
// rows and requests), watch (handover and drain requests, a row during a
// planned handover), create (a Lease's first write) and patch (every
// later write).
var Verbs = []string{"get", "list", "watch", "create", "patch"}

// CheckAccess asks the API server, with one SelfSubjectAccessReview per
// verb, whether the store's identity may use every verb of Verbs on
// leases in its namespace. It returns an error wrapping ErrForbidden that
// names every missing verb, or the failure of a review itself.
func (s *Store) CheckAccess(ctx context.Context) error {
	var missing []string
	for _, verb := range Verbs {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: s.ns, Verb: verb,
				Group: "coordination.k8s.io", Resource: "leases"}}}
		var out authorizationv1.SelfSubjectAccessReview
		err := s.authz.Post().Resource("selfsubjectaccessreviews").MaxRetries(0).Body(r).Do(ctx).Into(&out)
		if err != nil {
			return readErr(fmt.Sprintf("SelfSubjectAccessReview of %s on leases in namespace %s", verb, s.ns), err)
		}
		if !out.Status.Allowed {
			missing = append(missing, verb)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing verb(s) %s on leases.coordination.k8s.io in namespace %q (the store needs %s; see examples/kubernetes/lease-rbac.yaml)",
			ErrForbidden, strings.Join(missing, ", "), s.ns, strings.Join(Verbs, ", "))
	}
	return nil
}
