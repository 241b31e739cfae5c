package kubestore

import (
	"fmt"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
)

// The store talks to the API server through REST clients over a scheme of
// only the types it sends and reads: Lease and LeaseList of
// coordination.k8s.io/v1, SelfSubjectAccessReview of authorization.k8s.io/v1,
// and the meta types each group's registration adds (ListOptions,
// WatchEvent, Status). client-go's typed clientset would register every
// API group of Kubernetes and link them all into the binary: about 49 MB
// of it, mapped into every process whatever its lease store
// (cmd/leasebridge TestBinaryLinksNoClientset keeps them out).
var (
	kubeScheme     = newScheme()
	kubeCodecs     = serializer.NewCodecFactory(kubeScheme)
	parameterCodec = runtime.NewParameterCodec(kubeScheme)
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// Both registrations add the group's meta types too
	// (metav1.AddToGroupVersion); they cannot fail on a new scheme.
	utilruntime.Must(coordinationv1.AddToScheme(s))
	utilruntime.Must(authorizationv1.AddToScheme(s))
	return s
}

// clients are the store's REST clients, on one HTTP client so both share
// its connections.
type clients struct {
	leases rest.Interface // coordination.k8s.io/v1
	authz  rest.Interface // authorization.k8s.io/v1
	http   *http.Client
}

// newClients builds the REST clients of rc for the two groups.
func newClients(rc *rest.Config) (clients, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return clients{}, fmt.Errorf("%w: HTTP client for %s: %w", ErrConfig, rc.Host, err)
	}
	leases, err := restClient(rc, hc, coordinationv1.SchemeGroupVersion)
	if err != nil {
		return clients{}, err
	}
	authz, err := restClient(rc, hc, authorizationv1.SchemeGroupVersion)
	if err != nil {
		return clients{}, err
	}
	return clients{leases: leases, authz: authz, http: hc}, nil
}

// restClient is the JSON REST client of group version gv at /apis, with
// rc's settings (no rate limiter: rc.QPS is negative).
func restClient(rc *rest.Config, hc *http.Client, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := *rc
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = kubeCodecs.WithoutConversion()
	rcl, err := rest.RESTClientForConfigAndClient(&c, hc)
	if err != nil {
		return nil, fmt.Errorf("%w: client of %s for %s: %w", ErrConfig, gv, rc.Host, err)
	}
	return rcl, nil
}
