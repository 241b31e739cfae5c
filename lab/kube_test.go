package lab

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testkube"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/lease/kubestore"
)

// kubeLab is the failover lab on the Kubernetes lease store: the same
// device, brokers and `leasebridge run` processes, with lease_store.
// kubernetes instead of etcd endpoints, each bridge reaching one real
// kube-apiserver through its own fault proxy, authenticated as a user
// bound to nothing but the shipped Role (examples/kubernetes/lease-rbac.yaml).
type kubeLab struct {
	*lab
	api *testkube.APIServer
	ns  string
}

// Fault kinds of the API server.
const (
	kindAPIRestart = "API server SIGKILL and restart"
	kindAPIEtcd    = "API server's etcd SIGKILL and restart"
)

// kubeKinds are the kinds the Kubernetes lab runs, in order.
func (k *kubeLab) kinds() []kind {
	return []kind{
		{"kill", fixed(kindKill), (*lab).ownerKill},
		{"stop", fixed(kindStop), (*lab).ownerStop},
		{"partition", fixed(kindPartition), (*lab).storePartition},
		{"drop", fixed(kindDrop), (*lab).storeDrop},
		{"delay", fixed(kindDelay), (*lab).storeDelay},
		{"apirestart", fixed(kindAPIRestart), func(_ *lab, tr *trial, owner *bridge) { k.apiRestart(tr, owner) }},
		{"apietcd", fixed(kindAPIEtcd), func(_ *lab, tr *trial, owner *bridge) { k.apiEtcd(tr, owner) }},
	}
}

// TestKubeFailoverLab runs the fault kinds against 2 and then 3 bridges
// on the Kubernetes lease store (LEASEBRIDGE_KUBE_LAB_KINDS: a comma list
// of kind names to run instead; LEASEBRIDGE_LAB_ROUNDS: rounds). Every
// takeover is held to its admitted budget, the device's request log must
// show one client at a time, and after every trial the session's Lease
// names the owning bridge as its holder.
func TestKubeFailoverLab(t *testing.T) {
	rounds := 1
	if s := os.Getenv("LEASEBRIDGE_LAB_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LEASEBRIDGE_LAB_ROUNDS=%q: want a positive integer", s)
		}
		rounds = n
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d bridges", n), func(t *testing.T) {
			k := startKubeLab(t, n)
			run := k.kinds()
			if s := os.Getenv("LEASEBRIDGE_KUBE_LAB_KINDS"); s != "" {
				run = pick(t, run, s)
			}
			for round := 1; round <= rounds; round++ {
				for _, kd := range run {
					k.trial(round, kd)
				}
			}
			k.checkDevice()
		})
	}
}

// pick selects the kinds named in the comma list s.
func pick(t *testing.T, all []kind, s string) []kind {
	var out []kind
	for _, name := range strings.Split(s, ",") {
		found := false
		for _, kd := range all {
			if kd.short == strings.TrimSpace(name) {
				out, found = append(out, kd), true
			}
		}
		if !found {
			t.Fatalf("LEASEBRIDGE_KUBE_LAB_KINDS=%q: unknown kind %q", s, name)
		}
	}
	return out
}

// trial runs one fault kind and checks the Lease's holder after it.
func (k *kubeLab) trial(round int, kd kind) {
	t := k.t
	tr := &trial{N: len(k.trials) + 1, Round: round, Kind: kd.label(round), Short: kd.short, FencedRequests: -1}
	k.trials = append(k.trials, tr)
	k.run(tr, kd)
	if len(tr.Errs) == 0 {
		k.checkHolder(tr)
	}
	for _, e := range tr.Errs {
		t.Errorf("trial %d (%s): %s", tr.N, tr.Kind, e)
	}
	t.Logf("trial %2d %-12s %s", tr.N, kd.short, tr.line())
	if len(tr.Errs) > 0 {
		for _, b := range k.bridges {
			t.Logf("%s log tail:\n%s", b.name, b.tail(15))
		}
	}
}

// checkDevice fails on any two connections the device served at once,
// over the whole run.
func (k *kubeLab) checkDevice() {
	all := k.dev.conns(time.Time{})
	for _, o := range overlaps(all) {
		k.t.Errorf("%s", o)
	}
	for _, o := range k.rec.overlaps() {
		k.t.Errorf("two device connections served at once (proxy view): %s", o)
	}
	if k.t.Failed() {
		k.t.Logf("device request log by connection:\n%s", k.dev.summary())
	}
}

func startKubeLab(t *testing.T, n int) *kubeLab {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	testbin.Leasebridge(t)
	api := testkube.Start(t)
	k := &kubeLab{lab: &lab{t: t, ctx: ctx, began: time.Now(), loadStart: loadAverage()}, api: api, ns: "lab"}
	api.Namespace(k.ns)
	api.ApplyRole("../examples/kubernetes/lease-rbac.yaml", k.ns)
	l := k.lab
	l.dev = startDevice(ctx, t)
	l.rec = recordPLC(ctx, l.dev.proxy)
	dir := t.TempDir()
	var urls []string
	for i := range n {
		m := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})
		px, err := faultproxy.Start(ctx, m.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		store := startStorePath(ctx, t, []string{"https://" + api.Addr})
		b := newBridge(t, dir, fmt.Sprintf("bridge-%c", 'a'+i), store, l.dev.Addr(), m, px)
		b.spec.Kubernetes = fmt.Sprintf("namespace: %s, kubeconfig: %q", k.ns, api.Kubeconfig(testkube.UserToken, store[0].Addr(), k.ns))
		if err := b.configure(0); err != nil {
			t.Fatal(err)
		}
		l.bridges = append(l.bridges, b)
		urls = append(urls, m.URL)
	}
	l.report = l.bridges[0].report
	l.watch = watchValues(t, urls)
	for _, b := range l.bridges {
		b.start(t)
	}
	return k
}

// checkHolder checks that the session's Lease, as the API reports it,
// names the bridge that owns the session: holderIdentity is its lease
// identity (node name, '#', a per-process suffix) and the node annotation
// its name.
func (k *kubeLab) checkHolder(tr *trial) {
	ctx, cancel := context.WithTimeout(k.ctx, k.report.OwnerDeath.Total)
	defer cancel()
	var last string
	err := poll(ctx, func() bool {
		var owner *bridge
		for _, b := range k.bridges {
			if st, ok := b.status(); ok && st.Owner && st.ServiceLevelFull {
				owner = b
			}
		}
		l, err := k.api.Admin().CoordinationV1().Leases(k.ns).Get(ctx, "lab.plc", metav1.GetOptions{})
		if err != nil || owner == nil || l.Spec.HolderIdentity == nil {
			last = fmt.Sprintf("owner %v, Lease %v", owner != nil, err)
			return false
		}
		last = fmt.Sprintf("owner %s, holderIdentity %s, node %s", owner.name, *l.Spec.HolderIdentity, l.Annotations[kubestore.AnnotationNode])
		return strings.HasPrefix(*l.Spec.HolderIdentity, owner.name+"#") && l.Annotations[kubestore.AnnotationNode] == owner.name
	})
	if err != nil {
		tr.fail("the Lease does not name the owner as its holder: %s", last)
	}
}

// apiRestart kills the API server and starts it again on the same port
// and etcd. Nothing can renew while it is down, longer than lease_ttl
// with its start-up: the owner fences itself, and once the API server
// answers again a standby (or the fenced owner) takes over, measured from
// the new process's start (its start-up charged to the failover) against
// the owner-death budget.
func (k *kubeLab) apiRestart(tr *trial, owner *bridge) {
	k.ownerDeath(tr)
	t0 := time.Now()
	k.api.Stop()
	tr.FenceBy = t0.Add(owner.report.FenceAfter)
	_ = sleepCtx(k.ctx, k.report.Timing.LeaseTTL)
	back := k.api.Restart()
	tr.Outage = back.Sub(t0)
	tr.note("API server down %s, ready %s after its start", fs(tr.Outage), fs(time.Since(back)))
	k.takeover(tr, back)
	k.afterFence(tr, owner)
}

// apiEtcd kills the API server's etcd for lease_ttl and restarts it: the
// API server answers, but every read and write fails, so the owner
// fences itself as in a quorum loss; the takeover is measured from etcd's
// restart against the owner-death budget.
func (k *kubeLab) apiEtcd(tr *trial, owner *bridge) {
	k.ownerDeath(tr)
	t0 := time.Now()
	k.api.Etcd.Kill(0)
	tr.FenceBy = t0.Add(owner.report.FenceAfter)
	_ = sleepCtx(k.ctx, k.report.Timing.LeaseTTL+k.report.Timing.RenewInterval)
	back := time.Now()
	tr.Outage = back.Sub(t0)
	k.api.Etcd.Restart(0)
	tr.note("etcd down %s", fs(tr.Outage))
	k.takeover(tr, back)
	k.afterFence(tr, owner)
}
