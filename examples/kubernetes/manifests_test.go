// Package kubernetes checks the Kubernetes examples: every document decodes
// strictly into its k8s.io/api type (an unknown or misspelt field is an
// error), and the workloads keep what docs/topologies.md and
// docs/operations.md promise. It has only tests, so only this test binary
// links k8s.io/api.
package kubernetes

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"

	// The transports of every kind, which admission builds.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

// manifest is one example file's decoded objects.
type manifest struct {
	name         string
	configMaps   map[string]*corev1.ConfigMap
	services     map[string]*corev1.Service
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	pdbs         []*policyv1.PodDisruptionBudget
	accounts     []*corev1.ServiceAccount
	roles        []*rbacv1.Role
	bindings     []*rbacv1.RoleBinding
}

// decode reads every YAML document of file strictly into its API type.
func decode(t *testing.T, file string) *manifest {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest{name: file, configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{}}
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s document %d: %v", file, i+1, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			cm := &corev1.ConfigMap{}
			obj, m.configMaps[nameOf(doc)] = cm, cm
		case "v1 Service":
			svc := &corev1.Service{}
			obj, m.services[nameOf(doc)] = svc, svc
		case "v1 PersistentVolumeClaim":
			obj = &corev1.PersistentVolumeClaim{}
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			obj, m.deployments = d, append(m.deployments, d)
		case "apps/v1 StatefulSet":
			s := &appsv1.StatefulSet{}
			obj, m.statefulSets = s, append(m.statefulSets, s)
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			obj, m.pdbs = p, append(m.pdbs, p)
		case "v1 ServiceAccount":
			a := &corev1.ServiceAccount{}
			obj, m.accounts = a, append(m.accounts, a)
		case "rbac.authorization.k8s.io/v1 Role":
			r := &rbacv1.Role{}
			obj, m.roles = r, append(m.roles, r)
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			b := &rbacv1.RoleBinding{}
			obj, m.bindings = b, append(m.bindings, b)
		default:
			t.Fatalf("%s document %d: unexpected %s %s", file, i+1, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("%s document %d (%s): %v", file, i+1, tm.Kind, err)
		}
	}
	return m
}

func nameOf(doc []byte) string {
	var o metav1.PartialObjectMetadata
	_ = yaml.Unmarshal(doc, &o)
	return o.Name
}

// pods are the manifest's pod templates by workload name.
func (m *manifest) pods() map[string]*corev1.PodTemplateSpec {
	p := map[string]*corev1.PodTemplateSpec{}
	for _, d := range m.deployments {
		p[d.Name] = &d.Spec.Template
	}
	for _, s := range m.statefulSets {
		p[s.Name] = &s.Spec.Template
	}
	return p
}

// bridge returns the pod template running leasebridge and its container.
func (m *manifest) bridge(t *testing.T) (*corev1.PodTemplateSpec, *corev1.Container) {
	t.Helper()
	for _, pod := range m.pods() {
		for i := range pod.Spec.Containers {
			if c := &pod.Spec.Containers[i]; c.Name == "leasebridge" {
				return pod, c
			}
		}
	}
	t.Fatalf("%s: no leasebridge container", m.name)
	return nil, nil
}

// bridgeConfig parses the leasebridge ConfigMap as `leasebridge run` would.
func (m *manifest) bridgeConfig(t *testing.T) *routes.Config {
	t.Helper()
	cm := m.configMaps["leasebridge"]
	if cm == nil {
		t.Fatalf("%s: no leasebridge ConfigMap", m.name)
	}
	cfg, err := routes.Parse(m.name+": ConfigMap leasebridge", []byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Every container runs as non-root without privileges on a read-only root,
// with a memory limit; every pod uses the runtime's seccomp profile.
func checkHardened(t *testing.T, m *manifest) {
	for name, pod := range m.pods() {
		psc := pod.Spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s %s: pod securityContext needs runAsNonRoot and seccompProfile RuntimeDefault", m.name, name)
		}
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			sc := c.SecurityContext
			switch {
			case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s %s/%s: no readOnlyRootFilesystem", m.name, name, c.Name)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s %s/%s: allowPrivilegeEscalation is not false", m.name, name, c.Name)
			case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0:
				t.Errorf("%s %s/%s: capabilities must drop ALL and add none", m.name, name, c.Name)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s %s/%s: no memory limit", m.name, name, c.Name)
			}
		}
	}
}

// The bridge container: probes on /healthz and /readyz, GOMEMLIMIT from
// its own memory request below its limit, the image built from this
// repository, a PodDisruptionBudget over its pods.
func checkBridge(t *testing.T, m *manifest) {
	pod, c := m.bridge(t)
	for probe, want := range map[*corev1.Probe]string{c.StartupProbe: "/healthz", c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want {
			t.Errorf("%s: a leasebridge probe is not an httpGet on %s: %+v", m.name, want, probe)
		}
	}
	if c.StartupProbe == nil || c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Fatalf("%s: leasebridge lacks a startup, liveness or readiness probe", m.name)
	}
	var memlimit *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "GOMEMLIMIT" {
			memlimit = &c.Env[i]
		}
	}
	switch {
	case memlimit == nil || memlimit.ValueFrom == nil || memlimit.ValueFrom.ResourceFieldRef == nil:
		t.Errorf("%s: GOMEMLIMIT is not derived from the container's resources", m.name)
	case memlimit.ValueFrom.ResourceFieldRef.Resource != "requests.memory" || memlimit.ValueFrom.ResourceFieldRef.ContainerName != c.Name:
		t.Errorf("%s: GOMEMLIMIT from %+v, want the leasebridge container's requests.memory", m.name, memlimit.ValueFrom.ResourceFieldRef)
	default:
		req, lim := c.Resources.Requests.Memory().Value(), c.Resources.Limits.Memory().Value()
		if req >= lim || req < lim*8/10 {
			t.Errorf("%s: memory request %d (GOMEMLIMIT) should be 80-100 %% of the limit %d", m.name, req, lim)
		}
	}
	if !strings.Contains(c.Image, "/leasebridge:v") {
		t.Errorf("%s: image %q is not a versioned leasebridge image", m.name, c.Image)
	}
	covered := false
	for _, p := range m.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		covered = covered || sel.Matches(labels.Set(pod.Labels))
	}
	if !covered {
		t.Errorf("%s: no PodDisruptionBudget selects the leasebridge pods", m.name)
	}
}

// Topology (a): the bridge pods contain no broker; their local broker is the
// manifest's single-replica broker Service, whose per-client queue holds
// the busiest session's owner-death budget at the rate the comment gives.
func TestSharedBrokerTopology(t *testing.T) {
	m := decode(t, "shared-broker.yaml")
	checkHardened(t, m)
	checkBridge(t, m)
	pod, _ := m.bridge(t)
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 {
		t.Errorf("bridge pod runs %d containers and %d init containers; topology (a) runs the bridge alone", len(pod.Spec.Containers), len(pod.Spec.InitContainers))
	}
	cfg := m.bridgeConfig(t)
	host := strings.Split(strings.TrimPrefix(cfg.Brokers["local"].URL, "tcp://"), ":")[0]
	svc := m.services[host]
	if svc == nil {
		t.Fatalf("local broker %s is not a Service of the manifest", cfg.Brokers["local"].URL)
	}
	broker := m.pods()[host]
	if broker == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(broker.Labels)) {
		t.Fatalf("Service %s selects no broker workload of the manifest", host)
	}
	for _, d := range m.deployments {
		if d.Name == host && (d.Spec.Replicas == nil || *d.Spec.Replicas != 1) {
			t.Errorf("broker %s must run one replica: independent brokers behind one Service strand messages", host)
		}
	}
	checkQueueSizing(t, m, cfg)
}

var (
	queueRate   = regexp.MustCompile(`\(press-1: ([0-9.]+) s\) at ([0-9]+) msg/s`)
	queuedLimit = regexp.MustCompile(`(?m)^max_queued_messages ([0-9]+)$`)
)

// checkQueueSizing recomputes the mosquitto comment's arithmetic from
// admission.
func checkQueueSizing(t *testing.T, m *manifest, cfg *routes.Config) {
	conf := m.configMaps["mosquitto"].Data["mosquitto.conf"]
	rate, limit := queueRate.FindStringSubmatch(conf), queuedLimit.FindStringSubmatch(conf)
	if rate == nil || limit == nil {
		t.Fatalf("mosquitto.conf lacks the sizing comment or max_queued_messages:\n%s", conf)
	}
	reports, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var budget float64
	for _, r := range reports {
		if r.Session == "press-1" {
			budget = r.OwnerDeath.Total.Seconds()
		}
	}
	if got := fmt.Sprint(budget); got != rate[1] {
		t.Errorf("mosquitto.conf says press-1's owner-death budget is %s s; admission says %s s", rate[1], got)
	}
	// docs/topologies.md walks through the same arithmetic.
	doc, err := os.ReadFile("../../docs/topologies.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("owner-death budget of %s s", fmt.Sprint(budget)); !strings.Contains(string(doc), want) {
		t.Errorf("docs/topologies.md lacks %q (admission's figure)", want)
	}
	perSecond, _ := strconv.Atoi(rate[2])
	queued, _ := strconv.Atoi(limit[1])
	if need := float64(perSecond) * budget; float64(queued) < need {
		t.Errorf("max_queued_messages %d < %d msg/s x %.1f s = %.0f", queued, perSecond, budget, need)
	}
}

// Topology (b): the broker is a native sidecar of the bridge's pod (an init
// container with restartPolicy Always, started before the bridge and
// stopped after it) and the bridge's local broker is that sidecar.
func TestClusteredBrokerTopology(t *testing.T) {
	m := decode(t, "clustered-broker.yaml")
	checkHardened(t, m)
	checkBridge(t, m)
	pod, _ := m.bridge(t)
	sidecar := false
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && c.StartupProbe != nil {
			for _, p := range c.Ports {
				sidecar = sidecar || p.ContainerPort == 1883
			}
		}
	}
	if !sidecar {
		t.Errorf("no native sidecar broker (init container, restartPolicy Always, startupProbe, port 1883) in the bridge pod")
	}
	if url := m.bridgeConfig(t).Brokers["local"].URL; url != "tcp://127.0.0.1:1883" {
		t.Errorf("local broker %s, want the sidecar at tcp://127.0.0.1:1883", url)
	}
}

// A misspelt field is an error, so the strict decoding above means
// something.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n"), &appsv1.Deployment{})
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("unknown field accepted: %v", err)
	}
}

// storeSet is fleet-store.yaml's StatefulSet of members.
func storeSet(t *testing.T, m *manifest) *appsv1.StatefulSet {
	t.Helper()
	if len(m.statefulSets) != 1 {
		t.Fatalf("%s: %d StatefulSets, want the members' one", m.name, len(m.statefulSets))
	}
	return m.statefulSets[0]
}

// storeConfigs parses each member's file of the leasebridge-store
// ConfigMap, by pod name, and checks it is a member's file of its pod.
func storeConfigs(t *testing.T, m *manifest, sts *appsv1.StatefulSet) map[string]*routes.Config {
	t.Helper()
	cm := m.configMaps["leasebridge-store"]
	if cm == nil || sts.Spec.Replicas == nil {
		t.Fatalf("%s: no leasebridge-store ConfigMap or no replicas", m.name)
	}
	out := map[string]*routes.Config{}
	for i := range int(*sts.Spec.Replicas) {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		raw, ok := cm.Data[pod+".yaml"]
		if !ok {
			t.Fatalf("%s: ConfigMap leasebridge-store has no %s.yaml for pod %s", m.name, pod, pod)
		}
		cfg, err := routes.Parse(m.name+": ConfigMap leasebridge-store "+pod+".yaml", []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Node != pod || len(cfg.Routes) != 0 || cfg.DataDir == "" {
			t.Errorf("%s %s.yaml: node %q, %d routes, data_dir %q; want node %s, no routes (a member's file), a data_dir", m.name, pod, cfg.Node, len(cfg.Routes), cfg.DataDir, pod)
		}
		var member struct {
			LeaseStore struct {
				MemberTLS map[string]string `json:"member_tls"`
			} `json:"lease_store"`
		}
		if err := yaml.Unmarshal([]byte(raw), &member); err != nil || len(member.LeaseStore.MemberTLS) != 3 {
			t.Errorf("%s %s.yaml: member_tls needs ca_file, cert_file and key_file: %v %v", m.name, pod, member.LeaseStore.MemberTLS, err)
		}
		for _, f := range member.LeaseStore.MemberTLS {
			if !mounted(sts, "store", f) {
				t.Errorf("%s %s.yaml: %s is not in a volume the store container mounts", m.name, pod, f)
			}
		}
		if _, errs := preflight.Admit(cfg, false); len(errs) > 0 {
			t.Errorf("%s %s.yaml is not admitted: %v", m.name, pod, errs)
		}
		out[pod] = cfg
	}
	return out
}

// mounted reports whether container c of sts mounts a volume above path.
func mounted(sts *appsv1.StatefulSet, c, path string) bool {
	for _, ct := range sts.Spec.Template.Spec.Containers {
		for _, vm := range ct.VolumeMounts {
			if ct.Name == c && strings.HasPrefix(path, vm.MountPath+"/") {
				return true
			}
		}
	}
	return false
}

// The members: a StatefulSet with stable names behind a headless Service
// that publishes them before they are ready, started in parallel (a first
// quorum needs two), a PersistentVolumeClaim per member holding the disk
// etcd needs, a PodDisruptionBudget of one, and each pod's file naming the
// member of that pod, reachable at its Service name over https.
func TestFleetStoreManifest(t *testing.T) {
	m := decode(t, "fleet-store.yaml")
	checkHardened(t, m)
	sts := storeSet(t, m)
	svc := m.services[sts.Spec.ServiceName]
	switch {
	case svc == nil:
		t.Fatalf("serviceName %q is not a Service of the manifest", sts.Spec.ServiceName)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses:
		t.Errorf("Service %s must be headless and publish members before they are ready", svc.Name)
	case !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)):
		t.Errorf("Service %s does not select the members", svc.Name)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: an ordered start never forms the first quorum", sts.Spec.PodManagementPolicy)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("want one volumeClaimTemplate, got %d", len(sts.Spec.VolumeClaimTemplates))
	}
	if got, need := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().Value(), etcdembed.DiskNeed(); got < need {
		t.Errorf("member volume %d bytes < %d, the disk a member takes", got, need)
	}
	if len(m.pdbs) != 1 || m.pdbs[0].Spec.MaxUnavailable == nil || m.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("want one PodDisruptionBudget with maxUnavailable 1: %+v", m.pdbs)
	} else if sel, err := metav1.LabelSelectorAsSelector(m.pdbs[0].Spec.Selector); err != nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("the PodDisruptionBudget does not select the members (%v)", err)
	}
	ports := map[int32]bool{}
	for _, p := range svc.Spec.Ports {
		ports[p.Port] = true
	}
	for pod, cfg := range storeConfigs(t, m, sts) {
		if len(cfg.LeaseStore.Members) != int(*sts.Spec.Replicas) {
			t.Errorf("%s.yaml: %d members for %d replicas", pod, len(cfg.LeaseStore.Members), *sts.Spec.Replicas)
		}
		for _, mb := range cfg.LeaseStore.Members {
			for _, raw := range []string{mb.PeerURL, mb.ClientURL} {
				u, err := url.Parse(raw)
				port, _ := strconv.Atoi(u.Port())
				if err != nil || u.Scheme != "https" || u.Hostname() != mb.Name+"."+svc.Name || !ports[int32(port)] {
					t.Errorf("%s.yaml member %s: %s, want https://%s.%s:PORT with a port of the Service", pod, mb.Name, raw, mb.Name, svc.Name)
				}
			}
		}
	}
}

// The bridges of both topologies use the members fleet-store.yaml runs,
// with its key prefix, over https with a client certificate from a mounted
// Secret, and no password: README's "from zero to running" creates every
// store they use.
func TestBridgesUseFleetStore(t *testing.T) {
	store := decode(t, "fleet-store.yaml")
	want := storeConfigs(t, store, storeSet(t, store))[storeSet(t, store).Name+"-0"].LeaseStore
	for _, file := range []string{"shared-broker.yaml", "clustered-broker.yaml"} {
		m := decode(t, file)
		ls := m.bridgeConfig(t).LeaseStore
		if !slices.Equal(ls.Members, want.Members) || ls.KeyPrefix != want.KeyPrefix {
			t.Errorf("%s: members %v prefix %s, want fleet-store.yaml's %v %s", file, ls.Members, ls.KeyPrefix, want.Members, want.KeyPrefix)
		}
		if len(ls.Endpoints) != 0 || ls.Username != "" || ls.PasswordEnv != "" || ls.PasswordFile != "" || ls.Plaintext {
			t.Errorf("%s: endpoints %v, user %q, password or plaintext: the members need none", file, ls.Endpoints, ls.Username)
		}
		if ls.TLS == nil || ls.TLS.CAFile == "" || ls.TLS.CertFile == "" || ls.TLS.KeyFile == "" {
			t.Fatalf("%s: lease_store.tls needs the fleet CA and a bridge certificate", file)
		}
		pod, c := m.bridge(t)
		for _, f := range []string{ls.TLS.CAFile, ls.TLS.CertFile, ls.TLS.KeyFile} {
			if !secretMounted(pod, c, f) {
				t.Errorf("%s: %s is not in a Secret the leasebridge container mounts", file, f)
			}
		}
		if reports, errs := preflight.Admit(m.bridgeConfig(t), false); len(errs) > 0 || len(reports) == 0 {
			t.Errorf("%s: the bridges' file is not admitted: %v", file, errs)
		}
	}
}

// secretMounted reports whether c mounts a Secret volume of pod above path.
func secretMounted(pod *corev1.PodTemplateSpec, c *corev1.Container, path string) bool {
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(path, vm.MountPath+"/") {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return true
			}
		}
	}
	return false
}
