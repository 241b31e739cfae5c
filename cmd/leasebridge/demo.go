package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/routes"
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
`

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

// demo starts an embedded etcd, an embedded broker and a simulated PLC,
// runs two bridge processes, kills the owner and reports the measured
// takeover beside the admitted budget.
func demo(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("demo", stderr)
	keep := fl.Bool("keep", false, "keep the working directory (configs and bridge logs)")
	if err := parseFlags(fl, args); err != nil {
		return flagStatus(err)
	}
	code, err := runDemo(stdout, *keep)
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge demo: %v\n", err)
	}
	return code
}

func runDemo(out io.Writer, keep bool) (int, error) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	dir, err := os.MkdirTemp("", "leasebridge-demo-")
	if err != nil {
		return exitRefused, err
	}
	if keep {
		fmt.Fprintf(out, "working directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	etcd, err := etcdembed.Start(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return exitRefused, err
	}
	defer etcd.Close()
	broker, err := embedbroker.Start("127.0.0.1:0")
	if err != nil {
		return exitRefused, err
	}
	defer broker.Close()
	plc, err := plcsim.Start(ctx, 100*time.Millisecond)
	if err != nil {
		return exitRefused, err
	}
	defer plc.Close()
	fmt.Fprintf(out, "embedded etcd %s, embedded MQTT broker %s, simulated PLC %s (behind a connection-counting proxy)\n",
		etcd.Endpoints[0], broker.URL, plc.Addr())

	var procs []*bridgeProc
	var budget admission.Report
	self, err := os.Executable()
	if err != nil {
		return exitRefused, err
	}
	for _, name := range []string{"bridge-a", "bridge-b"} {
		addr, err := freeAddr()
		if err != nil {
			return exitRefused, err
		}
		y := fmt.Sprintf(demoConfig, etcd.Endpoints[0], broker.URL, plc.Addr(), name, addr)
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			return exitRefused, err
		}
		cfg, err := routes.Parse(path, []byte(y))
		if err != nil {
			return exitInvalid, err
		}
		budget = cfg.Admit()[0]
		if !budget.Admitted() {
			return exitRefused, fmt.Errorf("demo configuration refused: %v", budget.Refusals)
		}
		p := &bridgeProc{name: name, http: addr, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
		logf, err := os.Create(p.log)
		if err != nil {
			return exitRefused, err
		}
		p.cmd = exec.Command(self, "run", "-c", path, "--log-format", "text")
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			return exitRefused, fmt.Errorf("start %s: %w", name, err)
		}
		go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
		defer func() { _ = p.cmd.Process.Kill(); <-p.done }()
		procs = append(procs, p)
	}
	fmt.Fprintf(out, "session plc-1 admitted: owner-death budget %s (lease_ttl %s, activation %s); broker_path_failover off\n",
		admission.FormatSeconds(budget.OwnerDeath.Total), admission.FormatSeconds(budget.Timing.LeaseTTL), admission.FormatSeconds(budget.Activation))
	fmt.Fprintf(out, "started bridge-a and bridge-b (logs in %s)\n", dir)

	// Watch what reaches the broker: each value carries its owner's epoch.
	var mu sync.Mutex
	firstByEpoch := map[uint64]time.Time{}
	err = broker.Server.Subscribe("demo/#", 1, func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		var v struct {
			Epoch uint64 `json:"epoch"`
		}
		if json.Unmarshal(pk.Payload, &v) == nil {
			mu.Lock()
			if _, ok := firstByEpoch[v.Epoch]; !ok {
				firstByEpoch[v.Epoch] = time.Now()
			}
			mu.Unlock()
		}
	})
	if err != nil {
		return exitRefused, err
	}

	owner, st, err := waitOwner(ctx, procs, nil, 60*time.Second)
	if err != nil {
		return exitRefused, err
	}
	fmt.Fprintf(out, "%s owns plc-1 and is serving (ServiceLevelFull); PLC connections now: %d\n", owner.name, plc.Proxy().Current())
	time.Sleep(time.Second)
	killedAt := time.Now()
	if err := owner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return exitRefused, err
	}
	<-owner.done
	fmt.Fprintf(out, "killed %s (SIGKILL); waiting for the standby\n", owner.name)
	succ, st, err := waitOwner(ctx, procs, owner, budget.OwnerDeath.Total+10*time.Second)
	if err != nil {
		return exitRefused, err
	}
	mu.Lock()
	var first time.Time
	var epoch uint64
	for e, at := range firstByEpoch {
		if e > epoch {
			epoch, first = e, at
		}
	}
	mu.Unlock()
	external := first.Sub(killedAt)
	metric := time.Duration(st.FailureToFullNS)
	peak := plc.Proxy().Peak()
	fmt.Fprintf(out, "%s took over plc-1 at epoch %d\n", succ.name, epoch)
	fmt.Fprintf(out, "  kill -> first value published by the successor:      %s\n", admission.FormatSecondsShort(external))
	fmt.Fprintf(out, "  FailureToFullDuration (%s, from its first observation of the stale row): %s\n", succ.name, admission.FormatSecondsShort(metric))
	fmt.Fprintf(out, "  admitted owner-death budget:                           %s\n", admission.FormatSeconds(budget.OwnerDeath.Total))
	fmt.Fprintf(out, "  peak concurrent PLC connections:                       %d\n", peak)
	if external > budget.OwnerDeath.Total || metric > budget.OwnerDeath.Total || peak > 1 {
		fmt.Fprintln(out, "RESULT: outside the promise")
		return exitRefused, errors.New("takeover exceeded its budget or the PLC saw two clients")
	}
	fmt.Fprintln(out, "RESULT: takeover within the admitted budget, and the PLC never saw two clients")
	return exitOK, nil
}

// sessionStatus reads the one session's status from /readyz at addr.
func sessionStatus(client *http.Client, addr string) (failover.SessionStatus, error) {
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		return failover.SessionStatus{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Sessions []failover.SessionStatus `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return failover.SessionStatus{}, fmt.Errorf("/readyz at %s: %w", addr, err)
	}
	if len(body.Sessions) != 1 {
		return failover.SessionStatus{}, fmt.Errorf("/readyz at %s: %d sessions, want 1", addr, len(body.Sessions))
	}
	return body.Sessions[0], nil
}

// waitOwner polls the bridges' /readyz until one other than skip owns the
// session at ServiceLevelFull.
func waitOwner(ctx context.Context, procs []*bridgeProc, skip *bridgeProc, limit time.Duration) (*bridgeProc, failover.SessionStatus, error) {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if p == skip {
				continue
			}
			st, err := sessionStatus(client, p.http)
			if err == nil && st.Owner && st.ServiceLevelFull {
				return p, st, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, failover.SessionStatus{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, failover.SessionStatus{}, fmt.Errorf("no bridge reached ServiceLevelFull within %s", limit)
}
