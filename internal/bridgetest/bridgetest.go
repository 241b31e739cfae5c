// Package bridgetest runs one bridge route across an owner death with
// real processes: a remote and a local mosquitto shared by two `leasebridge
// run` processes (the shared-broker topology), QoS 1 traffic with sequence
// numbers in each direction, and the owner SIGKILLed mid-stream. It
// reports what each direction sent, lost and received twice. The process
// test (cmd/leasebridge) and the failover lab (lab/) use it.
package bridgetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// Session and Route name the trial's bridge route.
const (
	Session = "uplink"
	Route   = "uplink"
)

// Topics of the two directions: sources and the targets they map to.
const (
	inSource  = "down/seq"   // on the remote broker
	inTarget  = "a/down/seq" // on the local broker
	outSource = "up/seq"     // on the local broker
	outTarget = "sites/a/up/seq"
)

// Options select a trial.
type Options struct {
	// Etcd is the lease store's endpoints, comma-separated; KeyPrefix
	// separates the trial's rows.
	Etcd, KeyPrefix string
	// Rate is the messages a second published in each direction.
	Rate float64
	// QueueLimit is max_queued_messages on both brokers; 0 sizes it per
	// docs/bridged-data.md: mqtt.QueueNeed(Rate, owner-death budget).
	QueueLimit int64
	// Before and After are how long traffic runs before the kill and
	// after the successor serves.
	Before, After time.Duration
}

// Direction is what one direction of the route carried.
type Direction struct {
	// Sent counts the messages published (each acknowledged by its
	// broker); Lost the sequence numbers never received; Duplicates the
	// deliveries beyond the first of a sequence number.
	Sent, Lost, Duplicates int
	// Forwarded is the successor's leasebridge_bridge_forwarded_total.
	Forwarded float64
}

// Result is one trial.
type Result struct {
	// In is remote to local, Out local to remote.
	In, Out Direction
	// QueueLimit is the brokers' max_queued_messages.
	QueueLimit int64
	// Budget is the admitted owner-death budget; Takeover the kill to the
	// successor reporting ServiceLevelFull on /sessions.
	Budget, Takeover time.Duration
	// Owner and Successor are the processes' node names.
	Owner, Successor string
}

// Lost is the messages lost in both directions.
func (r Result) Lost() int { return r.In.Lost + r.Out.Lost }

// Problems lists what a trial sized per the docs must not show: loss, a
// takeover beyond its budget, a successor that counted nothing forwarded.
func (r Result) Problems() []string {
	var p []string
	for _, d := range []struct {
		name string
		d    Direction
	}{{mqtt.In, r.In}, {mqtt.Out, r.Out}} {
		if d.d.Lost > 0 {
			p = append(p, fmt.Sprintf("%s: %d of %d messages lost (queue limit %d)", d.name, d.d.Lost, d.d.Sent, r.QueueLimit))
		}
		if d.d.Forwarded <= 0 {
			p = append(p, fmt.Sprintf("%s: the successor's leasebridge_bridge_forwarded_total is %g", d.name, d.d.Forwarded))
		}
	}
	if r.Takeover > r.Budget {
		p = append(p, fmt.Sprintf("takeover %s > owner-death budget %s", r.Takeover, r.Budget))
	}
	return p
}

// config is one process's configuration.
func config(o Options, node, httpAddr, local, remote string) string {
	return fmt.Sprintf(`deployment_mode: clustered
node: %s
http_listen: %s
lease_store: {endpoints: [%s], key_prefix: %s}
%sbrokers:
  local: {url: "%s", %s}
  cloud: {url: "%s", %s}
routes:
  - name: %s
    session: %s
    kind: bridge
    remote: cloud
    broker: local
    topics:
      - {from: "up/#", to: "sites/a/up/", direction: out, qos: 1}
      - {from: "down/#", to: "a/down/", direction: in, qos: 1}
`, node, httpAddr, o.Etcd, o.KeyPrefix, testbin.Manager, local, testbin.BrokerTimings, remote, testbin.BrokerTimings, Route, Session)
}

// Budget is the owner-death budget admission gives the trial's
// configuration.
func Budget(tb testing.TB, o Options) time.Duration {
	tb.Helper()
	y := config(o, "n", "127.0.0.1:1", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2")
	cfg, err := routes.Parse("bridgetest.yaml", []byte(y))
	if err != nil {
		tb.Fatal(err)
	}
	reps, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 || len(reps) != 1 || !reps[0].Admitted() {
		tb.Fatalf("bridgetest: configuration not admitted: %v %+v", errs, reps)
	}
	return reps[0].OwnerDeath.Total
}

// Run runs one trial; it fails tb only when the trial could not be run,
// and leaves judging the Result to the caller.
func Run(tb testing.TB, o Options) Result {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := Result{Budget: Budget(tb, o), QueueLimit: o.QueueLimit}
	if r.QueueLimit == 0 {
		r.QueueLimit = mqtt.QueueNeed(o.Rate, r.Budget)
	}
	remote := testmqtt.StartMosquitto(tb, testmqtt.MosquittoConfig{MaxQueuedMessages: int(r.QueueLimit)})
	local := testmqtt.StartMosquitto(tb, testmqtt.MosquittoConfig{MaxQueuedMessages: int(r.QueueLimit)})
	in := newStream(tb, remote.URL, local.URL, inSource, inTarget, "in")
	out := newStream(tb, local.URL, remote.URL, outSource, outTarget, "out")

	dir := tb.TempDir()
	a := Start(tb, o, dir, "bridge-a", local.URL, remote.URL)
	if err := a.Wait(ctx, r.Budget, Owning); err != nil {
		tb.Fatalf("bridgetest: first owner: %v", err)
	}
	b := Start(tb, o, dir, "bridge-b", local.URL, remote.URL)
	if err := b.Wait(ctx, r.Budget, Standing); err != nil {
		tb.Fatalf("bridgetest: standby: %v", err)
	}
	r.Owner, r.Successor = a.Node, b.Node

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []*stream{in, out} {
		wg.Add(1)
		go func() { defer wg.Done(); s.publish(tb, o.Rate, stop) }()
	}
	// Traffic flows through the first owner before the kill.
	if err := in.waitReceived(ctx, 1, r.Budget); err != nil {
		tb.Fatalf("bridgetest: in before the kill: %v", err)
	}
	if err := out.waitReceived(ctx, 1, r.Budget); err != nil {
		tb.Fatalf("bridgetest: out before the kill: %v", err)
	}
	sleep(ctx, o.Before)
	if err := a.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	killed := time.Now()
	if err := b.Wait(ctx, 2*r.Budget, Owning); err != nil {
		tb.Fatalf("bridgetest: successor: %v", err)
	}
	r.Takeover = time.Since(killed)
	sleep(ctx, o.After)
	close(stop)
	wg.Wait()
	// The bridge forwards each direction in order, so the last sequence
	// number arriving ends the drain; what is missing then is lost.
	for _, s := range []*stream{in, out} {
		if err := s.waitLast(ctx, r.Budget); err != nil {
			tb.Fatalf("bridgetest: %s after the takeover: %v", s.name, err)
		}
	}
	r.In, r.Out = in.tally(), out.tally()
	r.In.Forwarded = b.Metric(tb, fmt.Sprintf(`leasebridge_bridge_forwarded_total{direction="%s",route="%s",session="%s"}`, mqtt.In, Route, Session))
	r.Out.Forwarded = b.Metric(tb, fmt.Sprintf(`leasebridge_bridge_forwarded_total{direction="%s",route="%s",session="%s"}`, mqtt.Out, Route, Session))
	return r
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stream publishes sequence numbers on one broker and counts their
// arrivals at the other.
type stream struct {
	name     string
	pub, sub paho.Client
	src      string
	mu       sync.Mutex
	sent     int
	seen     map[int]int
	arrived  chan struct{} // signalled on every arrival
}

func newStream(tb testing.TB, srcURL, dstURL, src, dst, name string) *stream {
	tb.Helper()
	s := &stream{name: name, src: src, seen: map[int]int{}, arrived: make(chan struct{}, 1),
		pub: testmqtt.Connect(tb, srcURL, "pub-"+name), sub: testmqtt.Connect(tb, dstURL, "sub-"+name)}
	tok := s.sub.Subscribe(dst, 1, func(_ paho.Client, m paho.Message) {
		n, err := strconv.Atoi(string(m.Payload()))
		if err != nil {
			return
		}
		s.mu.Lock()
		s.seen[n]++
		s.mu.Unlock()
		select {
		case s.arrived <- struct{}{}:
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("bridgetest: subscribe %s: %v", dst, tok.Error())
	}
	return s
}

// publish sends 1, 2, ... at rate until stop, each at QoS 1 and
// acknowledged by the source broker before it counts as sent.
func (s *stream) publish(tb testing.TB, rate float64, stop <-chan struct{}) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for n := 1; ; n++ {
		tok := s.pub.Publish(s.src, 1, false, strconv.Itoa(n))
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			tb.Errorf("bridgetest: publish %s %d: %v", s.src, n, tok.Error())
			return
		}
		s.mu.Lock()
		s.sent = n
		s.mu.Unlock()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// waitReceived waits until sequence number n arrived.
func (s *stream) waitReceived(ctx context.Context, n int, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		s.mu.Lock()
		ok := s.seen[n] > 0
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("message %d not received within %s", n, limit)
		case <-s.arrived:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitLast waits for the last sequence number sent.
func (s *stream) waitLast(ctx context.Context, limit time.Duration) error {
	s.mu.Lock()
	last := s.sent
	s.mu.Unlock()
	return s.waitReceived(ctx, last, limit)
}

func (s *stream) tally() Direction {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Direction{Sent: s.sent}
	for n := 1; n <= s.sent; n++ {
		switch c := s.seen[n]; {
		case c == 0:
			d.Lost++
		case c > 1:
			d.Duplicates += c - 1
		}
	}
	return d
}

// Proc is one `leasebridge run` process of a trial; Cmd is the running
// process.
type Proc struct {
	*testbin.Process
	// Node is its node name.
	Node string
	http string
}

// Start runs a process with the trial's configuration for o, its local
// broker at local and the remote one at remote; it is killed when tb
// ends, and its log printed if tb failed.
func Start(tb testing.TB, o Options, dir, node, local, remote string) *Proc {
	tb.Helper()
	addr := testbin.FreeAddr(tb)
	return &Proc{Process: testbin.Run(tb, dir, node, config(o, node, addr, local, remote)), Node: node, http: addr}
}

// Owning holds for an owner at ServiceLevelFull.
func Owning(s failover.SessionStatus) bool { return s.Owner && s.ServiceLevelFull }

// Standing holds for a standby.
func Standing(s failover.SessionStatus) bool { return !s.Owner && s.State == "standby" }

// Wait polls /sessions until the trial's session satisfies ok.
func (p *Proc) Wait(ctx context.Context, limit time.Duration, ok func(failover.SessionStatus) bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	last := "no answer"
	for {
		if st, err := p.Status(ctx); err == nil {
			if ok(st) {
				return nil
			}
			last = fmt.Sprintf("%+v", st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not reached within %s; last status %s", p.Node, limit, last)
		case <-p.Done:
			return fmt.Errorf("%s exited", p.Node)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Status is the trial session's entry on /sessions.
func (p *Proc) Status(ctx context.Context) (failover.SessionStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/sessions", nil)
	if err != nil {
		return failover.SessionStatus{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return failover.SessionStatus{}, err
	}
	defer resp.Body.Close()
	var all []failover.SessionStatus
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		return failover.SessionStatus{}, err
	}
	for _, s := range all {
		if s.Session == Session {
			return s, nil
		}
	}
	return failover.SessionStatus{}, fmt.Errorf("%s: no session %s on /sessions", p.Node, Session)
}

// Metric reads one series, named with its labels as /metrics prints
// them, from the process's /metrics.
func (p *Proc) Metric(tb testing.TB, series string) float64 {
	tb.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		tb.Fatalf("bridgetest: %s /metrics: %v", p.Node, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("bridgetest: %s: %q: %v", p.Node, sc.Text(), err)
			}
			return f
		}
	}
	tb.Fatalf("bridgetest: %s /metrics has no %s", p.Node, series)
	return 0
}
