package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/bridgewatch"
	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	// The kinds the demo's configuration names, as leasebridge registers
	// them, so admission here computes the budget the bridges run with.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

// demoConfig is the bridges' configuration: second-scale timings so a
// takeover is seen in seconds. %s are the etcd endpoint, the broker URL,
// the PLC address, the node name and the HTTP address.
const demoConfig = `deployment_mode: clustered
node: %[4]s
http_listen: %[5]s
lease_store:
  endpoints: [%[1]s]
  key_prefix: /leasebridge-demo/
manager:
  lease_ttl: 3s
  renew_interval: 500ms
  lease_renew_jitter: 100ms
  renew_call_timeout: 300ms
  acquire_poll_interval: 300ms
  broker_health_step_down: "off"
  failover_slo: 30s
brokers:
  local:
    url: %[2]s
    connect_timeout: 1s
    reconcile_timeout: 1s
    unmatched_grace: 500ms
    close_timeout: 500ms
devices:
  plc-1:
    kind: modbus_tcp
    address: %[3]s
    connect_timeout: 1s
    request_timeout: 500ms
    close_timeout: 200ms
    groups:
      - name: line
        interval: 100ms
        tags:
          - {name: cycles, register: holding, address: 0, type: uint16}
          - {name: setpoint, register: holding, address: 1, type: uint16, writable: true}
routes:
  - {name: plc-1-telemetry, session: plc-1, kind: poll, device: plc-1, broker: local, publish: every_poll, topic: "demo/{device}/{tag}"}
  - {name: plc-1-commands, session: plc-1, kind: write, device: plc-1, broker: local, request_topic: demo-cmd/plc-1/write, reply_topic: demo-cmd/plc-1/reply, qos: 1}
`

// The demo's write: setpoint (holding register plcsim.SetpointRegister)
// set through the broker, then read back from the PLC.
const (
	demoWriteTopic = "demo-cmd/plc-1/write"
	demoReplyTopic = "demo-cmd/plc-1/reply"
	demoSetpoint   = 1234
)

// termMeaning says what each owner-death term pays for at its limit, and
// why a run on one machine pays little of it.
var termMeaning = map[string]string{
	"lease_ttl":         "the dead owner's row stays valid until its lease expires: paid in full",
	"poll_boundaries":   "the standby's poll may land just before the expiry: at most two poll intervals, usually less",
	"observation_calls": "every lease store call at its renew_call_timeout: on loopback they take milliseconds",
	"activation":        "every connect, reconcile and retry of the PLC and the broker at its timeout: here they connect at once",
	"startup_allowance": "starting a bridge process: the standbys already run",
	"store_recovery":    "the fleet's store electing a new leader, if the dead node's member led, beyond what observation_calls covers",
}

type bridgeProc struct {
	name string
	http string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// demoEnv is one run of the demo: its peers, bridges and what the broker
// saw.
type demoEnv struct {
	ctx    context.Context
	out    io.Writer
	dir    string
	etcd   *etcdembed.Server
	broker *embedbroker.Broker
	plc    *plcsim.PLC
	budget admission.Report
	procs  []*bridgeProc
	seen   *payloads
	// bridge is the leasebridge binary the bridges run.
	bridge string
	// fleet runs three nodes, each a `leasebridge store` member and a
	// bridge, as the lease store instead of the embedded etcd; stores
	// are the member processes, in node order.
	fleet  bool
	stores []*bridgeProc
	// files and addrs are each node's configuration file and
	// http_listen, written once for its member and its bridge.
	files, addrs map[string]string
	// members is the fleet's lease_store block and clients the members'
	// client URLs, in node order (fleet mode).
	members string
	clients []string
}

// runDemo runs the demo in dir, which it removes at the end unless keep;
// bridge is the leasebridge binary to run, empty for the one beside this
// command or a fresh build.
func runDemo(ctx context.Context, out io.Writer, dir string, keep bool, bridge string, fleet bool) (int, error) {
	if keep {
		defer fmt.Fprintf(out, "working directory kept: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	d := &demoEnv{ctx: ctx, out: out, dir: dir, seen: &payloads{first: map[uint64]payload{}}, bridge: bridge, fleet: fleet,
		files: map[string]string{}, addrs: map[string]string{}}
	if err := d.findBridge(); err != nil {
		return exitRefused, err
	}
	// Deferred in reverse: the bridges die before the peers they use.
	defer d.closePeers()
	if err := d.startPeers(); err != nil {
		return exitRefused, err
	}
	defer d.killBridges()
	if err := d.startStores(); err != nil {
		return exitRefused, err
	}
	if code, err := d.startBridges(); err != nil {
		return code, err
	}
	return d.takeover()
}

func (d *demoEnv) startPeers() error {
	var err error
	store := "the fleet's own store (three `leasebridge store` members, below)"
	if !d.fleet {
		if d.etcd, err = etcdembed.Start(d.ctx, filepath.Join(d.dir, "etcd")); err != nil {
			return err
		}
		store = "embedded etcd " + d.etcd.Endpoints[0]
	}
	if d.broker, err = embedbroker.Start("127.0.0.1:0"); err != nil {
		return err
	}
	if d.plc, err = plcsim.Start(d.ctx, 100*time.Millisecond); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%s, embedded MQTT broker %s, simulated PLC %s (behind a connection-counting proxy)\n",
		store, d.broker.URL, d.plc.Addr())
	// Watch what reaches the broker: each value carries its owner's epoch.
	return d.broker.Server.Subscribe("demo/#", 1, d.seen.record)
}

func (d *demoEnv) closePeers() {
	if d.plc != nil {
		_ = d.plc.Close()
	}
	if d.broker != nil {
		_ = d.broker.Close()
	}
	if d.etcd != nil {
		d.etcd.Close()
	}
}

// nodes are the bridges' names: two on the embedded etcd, three (each
// with its member) on the fleet's own store.
func (d *demoEnv) nodes() []string {
	if d.fleet {
		return []string{"node-a", "node-b", "node-c"}
	}
	return []string{"bridge-a", "bridge-b"}
}

// config writes node's configuration file once, for its bridge and (in
// fleet mode) its member, and returns its path and text.
func (d *demoEnv) config(name string) (string, string, error) {
	path := filepath.Join(d.dir, name+".yaml")
	if d.files[name] != "" {
		return path, d.files[name], nil
	}
	addr, err := freeAddr()
	if err != nil {
		return "", "", err
	}
	endpoint := "unused"
	if d.etcd != nil {
		endpoint = d.etcd.Endpoints[0]
	}
	y := fmt.Sprintf(demoConfig, endpoint, d.broker.URL, d.plc.Addr(), name, addr)
	if d.fleet {
		if y, err = fleetConfig(y, filepath.Join(d.dir, name), d.members); err != nil {
			return "", "", err
		}
	}
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		return "", "", err
	}
	d.files[name], d.addrs[name] = y, addr
	return path, y, nil
}

// startBridges admits the demo configuration and starts the bridges,
// each in its own process group so that the demo alone decides when they
// end.
func (d *demoEnv) startBridges() (int, error) {
	for _, name := range d.nodes() {
		path, y, err := d.config(name)
		if err != nil {
			return exitRefused, err
		}
		cfg, err := routes.Parse(path, []byte(y))
		if err != nil {
			return exitInvalid, err
		}
		reports, errs := preflight.Admit(cfg, true)
		if len(errs) > 0 {
			return exitInvalid, errs
		}
		d.budget = reports[0]
		if !d.budget.Admitted() {
			return exitRefused, fmt.Errorf("demo configuration refused: %v", d.budget.Refusals)
		}
		p, err := d.spawn(name, d.addrs[name], "run", "-c", path, "--log-format", "text")
		if err != nil {
			return exitRefused, err
		}
		d.procs = append(d.procs, p)
	}
	d.explainBudget()
	if !d.fleet {
		fmt.Fprintf(d.out, "started bridge-a (pid %d) and bridge-b (pid %d); their configurations and logs are in %s\n",
			d.procs[0].cmd.Process.Pid, d.procs[1].cmd.Process.Pid, d.dir)
		return exitOK, nil
	}
	fmt.Fprintf(d.out, "started the bridges node-a (pid %d), node-b (pid %d) and node-c (pid %d), each beside its member; their configurations and logs are in %s\n",
		d.procs[0].cmd.Process.Pid, d.procs[1].cmd.Process.Pid, d.procs[2].cmd.Process.Pid, d.dir)
	return exitOK, nil
}

// spawn starts `leasebridge args...` in its own process group, logging to
// name's log file (name-store.log for a member).
func (d *demoEnv) spawn(name, addr string, args ...string) (*bridgeProc, error) {
	log := name
	if args[0] == "store" {
		log += "-store"
	}
	p := &bridgeProc{name: name, http: addr, log: filepath.Join(d.dir, log+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(d.bridge, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s %s: %w", args[0], name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// errBuildInterrupted reports a signal while the demo built leasebridge.
var errBuildInterrupted = errors.New("leasebridge-demo: interrupted while building leasebridge")

// findBridge settles which leasebridge binary the bridges run: the one
// given, else the one beside this command (scripts/demo builds both into
// one directory), else one built into the working directory, as under
// `go run ./cmd/leasebridge-demo`.
func (d *demoEnv) findBridge() error {
	if d.bridge != "" {
		return nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "leasebridge")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() {
			d.bridge = beside
			return nil
		}
	}
	d.bridge = filepath.Join(d.dir, "leasebridge")
	fmt.Fprintf(d.out, "building leasebridge into %s (the first build downloads Go modules, which can take a few minutes)\n", d.dir)
	build := exec.CommandContext(d.ctx, "go", "build", "-o", d.bridge, "github.com/leasebridge/leasebridge/cmd/leasebridge")
	if out, err := build.CombinedOutput(); err != nil {
		if d.ctx.Err() != nil {
			return errBuildInterrupted
		}
		return fmt.Errorf("go build of leasebridge (run from inside the repository, or pass --leasebridge): %w\n%s", err, out)
	}
	return nil
}

// killBridges kills every bridge's process group, then every member's,
// and waits for each.
func (d *demoEnv) killBridges() {
	for _, p := range append(slices.Clone(d.procs), d.stores...) {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// explainBudget prints the owner-death budget term by term, as admission
// computed it.
func (d *demoEnv) explainBudget() {
	b := d.budget.OwnerDeath
	fmt.Fprintf(d.out, "session plc-1 admitted (broker_path_failover %s). Its owner-death budget, %s, is the worst case with every term at its limit:\n",
		d.budget.BrokerPathFailover, admission.FormatSeconds(b.Total))
	terms := slices.Clone(b.Terms)
	slices.SortStableFunc(terms, func(x, y admission.Term) int { return int(y.Value - x.Value) })
	for _, t := range terms {
		fmt.Fprintf(d.out, "  %-18s %8s  %s\n", t.Name, admission.FormatSeconds(t.Value), termMeaning[t.Name])
	}
}

// takeover shows the owner at work, kills it and measures the standby's
// takeover against the budget.
func (d *demoEnv) takeover() (int, error) {
	owner, _, err := waitOwner(d.ctx, d.procs, nil, d.budget.OwnerDeath.Total+time.Minute)
	if err != nil {
		return exitRefused, err
	}
	epoch, sample, err := d.seen.waitEpoch(d.ctx, 0, d.budget.OwnerDeath.Total)
	if err != nil {
		return exitRefused, err
	}
	fmt.Fprintf(d.out, "%s owns plc-1 at epoch %d and is serving (ServiceLevelFull); PLC connections now: %d\n", owner.name, epoch, d.plc.Proxy().Current())
	fmt.Fprintf(d.out, "  epoch: the lease row's fencing number. It grows by one with every new owner, and every value and write reply\n"+
		"  carries it, so a consumer that keeps the highest epoch per session drops anything a stale owner sends.\n")
	fmt.Fprintf(d.out, "  published on %s: %s\n", sample.topic, sample.body)
	if err := d.write(); err != nil {
		return exitRefused, err
	}
	if err := waitStandby(d.ctx, d.procs, owner, d.budget.OwnerDeath.Total); err != nil {
		return exitRefused, err
	}
	if d.fleet {
		if err := d.leadOwner(owner); err != nil {
			return exitRefused, err
		}
	}
	killed := []*bridgeProc{owner}
	what := owner.name
	if m := d.memberOf(owner); m != nil {
		killed = append(killed, m)
		what = fmt.Sprintf("%s: its bridge and its store member", owner.name)
		if d.leads(owner.name) {
			what += ", the store's leader"
		}
	}
	killedAt := time.Now()
	for _, p := range killed {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return exitRefused, err
		}
	}
	for _, p := range killed {
		<-p.done
	}
	fmt.Fprintf(d.out, "killed %s (SIGKILL); waiting for a standby\n", what)
	succ, st, err := waitOwner(d.ctx, d.procs, owner, d.budget.OwnerDeath.Total+10*time.Second)
	if err != nil {
		return exitRefused, err
	}
	newEpoch, first, err := d.seen.waitEpoch(d.ctx, epoch, d.budget.OwnerDeath.Total)
	if err != nil {
		return exitRefused, err
	}
	return d.result(succ, st, newEpoch, first, killedAt)
}

// write sends one write request through the broker to the owner and reads
// the register back from the PLC.
func (d *demoEnv) write() error {
	replies := make(chan []byte, 1)
	err := d.broker.Server.Subscribe(demoReplyTopic, 2, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		select {
		case replies <- slices.Clone(pk.Payload):
		default:
		}
	})
	if err != nil {
		return err
	}
	// issued_at lets the bridge refuse a command that waited too long
	// (docs/writes.md).
	req := fmt.Sprintf(`{"id":"demo-1","tag":"setpoint","value":%d,"issued_at":%q}`, demoSetpoint, time.Now().UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(d.out, "write request on %s: %s\n", demoWriteTopic, req)
	if err := d.broker.Server.Publish(demoWriteTopic, []byte(req), false, 1); err != nil {
		return err
	}
	limit := d.budget.Activation
	select {
	case r := <-replies:
		fmt.Fprintf(d.out, "  reply on %s: %s\n", demoReplyTopic, r)
	case <-d.ctx.Done():
		return context.Cause(d.ctx)
	case <-time.After(limit):
		return fmt.Errorf("no write reply on %s within %s (the session's activation bound)", demoReplyTopic, admission.FormatSeconds(limit))
	}
	got := d.plc.Holding(plcsim.SetpointRegister)
	fmt.Fprintf(d.out, "  the PLC's holding register %d (setpoint) now reads %d\n", plcsim.SetpointRegister, got)
	if got != demoSetpoint {
		return fmt.Errorf("the write did not reach the PLC: setpoint %d, want %d", got, demoSetpoint)
	}
	return nil
}

// result prints the measured takeover beside the budget.
func (d *demoEnv) result(succ *bridgeProc, st failover.SessionStatus, epoch uint64, first payload, killedAt time.Time) (int, error) {
	budget := d.budget.OwnerDeath.Total
	external := first.at.Sub(killedAt)
	metric := time.Duration(st.FailureToFullNS)
	peak := d.plc.Proxy().Peak()
	fmt.Fprintf(d.out, "%s took over plc-1 at epoch %d\n", succ.name, epoch)
	fmt.Fprintf(d.out, "  first value at epoch %d, on %s: %s\n", epoch, first.topic, first.body)
	fmt.Fprintf(d.out, "  kill -> first value published by the successor:      %s\n", admission.FormatSecondsShort(external))
	fmt.Fprintf(d.out, "  FailureToFullDuration (%s, from its first observation of the stale row): %s\n", succ.name, admission.FormatSecondsShort(metric))
	fmt.Fprintf(d.out, "  admitted owner-death budget:                           %s\n", admission.FormatSeconds(budget))
	fmt.Fprintf(d.out, "  peak concurrent PLC connections:                       %d\n", peak)
	lt := d.budget.Timing.LeaseTTL
	fmt.Fprintf(d.out, "  Why the takeover is so much shorter than the budget: of its terms, only lease_ttl (%s) is paid in full by\n"+
		"  every takeover; the other %s are the worst case of polls, store calls and connections, which here take milliseconds.\n",
		admission.FormatSeconds(lt), admission.FormatSeconds(budget-lt))
	if external > budget || metric > budget || peak > 1 {
		fmt.Fprintln(d.out, "RESULT: outside the promise")
		return exitRefused, errors.New("takeover exceeded its budget or the PLC saw two clients")
	}
	fmt.Fprintln(d.out, "RESULT: takeover within the admitted budget, and the PLC never saw two clients")
	return exitOK, nil
}

// payload is one message the broker delivered.
type payload struct {
	at    time.Time
	topic string
	body  []byte
}

// payloads keeps the first value of each epoch.
type payloads struct {
	mu    sync.Mutex
	first map[uint64]payload
}

func (ps *payloads) record(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
	var v struct {
		Epoch uint64 `json:"epoch"`
	}
	if json.Unmarshal(pk.Payload, &v) != nil {
		return
	}
	p := payload{at: time.Now(), topic: pk.TopicName, body: slices.Clone(pk.Payload)}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.first[v.Epoch]; !ok {
		ps.first[v.Epoch] = p
	}
}

// waitEpoch waits for a value published at an epoch above after and
// returns the highest such epoch with its first value.
func (ps *payloads) waitEpoch(ctx context.Context, after uint64, limit time.Duration) (uint64, payload, error) {
	deadline := time.Now().Add(limit)
	for {
		ps.mu.Lock()
		var epoch uint64
		for e := range ps.first {
			epoch = max(epoch, e)
		}
		p := ps.first[epoch]
		ps.mu.Unlock()
		if epoch > after {
			return epoch, p, nil
		}
		if time.Now().After(deadline) {
			return 0, payload{}, fmt.Errorf("no value published at an epoch above %d within %s", after, admission.FormatSeconds(limit))
		}
		select {
		case <-ctx.Done():
			return 0, payload{}, context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitStandby waits until every bridge but owner answers on /sessions with
// its session not owned: a standby watching the row.
func waitStandby(ctx context.Context, procs []*bridgeProc, owner *bridgeProc, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, p := range procs {
		if p == owner {
			continue
		}
		if err := bridgewatch.WaitStandby(ctx, p.http, time.Until(deadline)); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

// waitOwner waits until a bridge other than skip owns its one session at
// ServiceLevelFull.
func waitOwner(ctx context.Context, procs []*bridgeProc, skip *bridgeProc, limit time.Duration) (*bridgeProc, failover.SessionStatus, error) {
	return bridgewatch.WaitOwner(ctx, procs, func(p *bridgeProc) string { return p.http }, skip, limit)
}
