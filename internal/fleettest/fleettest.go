// Package fleettest runs a small fleet of real `leasebridge run` processes
// for tests that look at it from outside, as an operator would: the fleet
// page in a browser (cmd/leasebridge/httpapi/fleetpage) and the Grafana
// dashboard's queries in Prometheus (examples). The fleet is one etcd, a
// local and a remote mosquitto, a simulated Modbus PLC, and processes that
// share one configuration with two sessions: plc (a poll and a write
// route) and uplink (a bridge route between the brokers).
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/internal/bridgewatch"
	"github.com/leasebridge/leasebridge/internal/plcsim"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/internal/writetest"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"

	// Every device kind, as the shipped binary has them.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

// The fleet's sessions, their routes and topics.
const (
	SessionPLC    = "plc"
	SessionUplink = "uplink"
	PollRoute     = "telemetry"
	WriteRoute    = "commands"
	BridgeRoute   = "uplink"
	// KeyPrefix is the fleet's key_prefix.
	KeyPrefix = "/fleettest/"
	// bridged messages: published on the remote broker under down/, they
	// arrive on the local one under a/down/.
	downSource, downTarget = "down/probe", "a/down/probe"
)

// Sessions are the fleet's sessions, by name.
var Sessions = []string{SessionPLC, SessionUplink}

// Fleet is the peers the processes share.
type Fleet struct {
	Etcd          *testetcd.Cluster
	Local, Remote *testmqtt.Mosquitto
	PLC           *plcsim.PLC
	dir           string
	writer        *writetest.Requester
	writes        int
}

// Start starts the peers; every one is stopped when t ends.
func Start(t testing.TB) *Fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &Fleet{dir: t.TempDir(), Etcd: testetcd.StartEmbedded(t, 1),
		Local: testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{}), Remote: testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{})}
	plc, err := plcsim.Start(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plc.Close() })
	f.PLC = plc
	return f
}

// Config is node's configuration, serving HTTP on httpAddr.
func (f *Fleet) Config(node, httpAddr string) string {
	return fmt.Sprintf(`deployment_mode: clustered
node: %s
http_listen: %s
lease_store: {endpoints: [%s], key_prefix: %s}
%sbrokers:
  local: {url: "%s", %s}
  cloud: {url: "%s", %s}
%sroutes:
  - {name: %s, session: %s, kind: poll, device: plc, broker: local, topic: "v/{device}/{tag}"}
  - {name: %s, session: %s, kind: write, device: plc, broker: local, request_topic: w/req, reply_topic: w/resp, qos: 1}
  - name: %s
    session: %s
    kind: bridge
    remote: cloud
    broker: local
    topics:
      - {from: "down/#", to: "a/down/", direction: in, qos: 1}
`, node, httpAddr, strings.Join(f.Etcd.Endpoints(), ", "), KeyPrefix, testbin.Manager,
		f.Local.URL, testbin.BrokerTimings, f.Remote.URL, testbin.BrokerTimings, testbin.PLCDevice(f.PLC.Addr(), 100*time.Millisecond),
		PollRoute, SessionPLC, WriteRoute, SessionPLC, BridgeRoute, SessionUplink)
}

// Budget is the largest owner-death budget admission gives the fleet's
// sessions: a limit for waits on a takeover, never a timing assertion.
func (f *Fleet) Budget(t testing.TB) time.Duration {
	t.Helper()
	cfg, err := routes.Parse("fleettest.yaml", []byte(f.Config("n", "127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	reps, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 || len(reps) != len(Sessions) {
		t.Fatalf("fleettest: configuration not admitted: %v %+v", errs, reps)
	}
	var b time.Duration
	for _, r := range reps {
		if !r.Admitted() {
			t.Fatalf("fleettest: %s refused: %v", r.Session, r.Refusals)
		}
		b = max(b, r.OwnerDeath.Total)
	}
	return b
}

// Proc is one `leasebridge run` process.
type Proc struct {
	*testbin.Process
	// Node is its node name, HTTP its http_listen.
	Node, HTTP string
}

// Run starts a process named node; it is killed when t ends, and its log
// printed when t failed.
func (f *Fleet) Run(t testing.TB, node string) *Proc {
	t.Helper()
	addr := testbin.FreeAddr(t)
	return &Proc{Process: testbin.Run(t, f.dir, node, f.Config(node, addr)), Node: node, HTTP: addr}
}

// Kill SIGKILLs the process and waits for it to end.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done
}

// URL is the process's http_listen as a URL with path.
func (p *Proc) URL(path string) string { return "http://" + p.HTTP + path }

// client bounds each request: a hang guard for the waits that poll.
var client = &http.Client{Timeout: 5 * time.Second}

// getJSON decodes the JSON at path into v.
func (p *Proc) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL(path), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", p.Node, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Sessions is the process's /sessions.
func (p *Proc) Sessions(ctx context.Context) ([]failover.SessionStatus, error) {
	return bridgewatch.Sessions(ctx, client, p.HTTP)
}

// FleetView is the process's /fleet.
func (p *Proc) FleetView(ctx context.Context) (fleetview.Status, error) {
	var st fleetview.Status
	return st, p.getJSON(ctx, "/fleet", &st)
}

// Wait polls /sessions until ok accepts every session; limit is a hang
// guard.
func (p *Proc) Wait(t testing.TB, limit time.Duration, what string, ok func(failover.SessionStatus) bool) []failover.SessionStatus {
	t.Helper()
	var all []failover.SessionStatus
	testbin.Observe(t, limit, func() (bool, string) {
		select {
		case <-p.Done:
			t.Fatalf("%s exited while waiting for %s", p.Node, what)
		default:
		}
		var err error
		if all, err = p.Sessions(context.Background()); err != nil {
			return false, err.Error()
		}
		for _, s := range all {
			if !ok(s) {
				return false, fmt.Sprintf("%s: %s not %s: %+v", p.Node, s.Session, what, s)
			}
		}
		return len(all) == len(Sessions), fmt.Sprintf("%s: %d sessions", p.Node, len(all))
	})
	return all
}

// Owning holds for an owner at ServiceLevelFull.
func Owning(s failover.SessionStatus) bool { return s.Owner && s.ServiceLevelFull }

// Standing holds for a standby.
func Standing(s failover.SessionStatus) bool { return !s.Owner && s.State == "standby" }

// Write sends one write request of the setpoint through the write route
// and waits for its reply (any code): the owner counts its outcome.
func (f *Fleet) Write(t testing.TB, limit time.Duration) {
	t.Helper()
	if f.writer == nil {
		f.writer = writetest.New(t, f.Local.URL, "w/req", "w/resp")
	}
	f.writes++
	id := fmt.Sprintf("fleettest-%d", f.writes)
	f.writer.Send(t, id, "setpoint", f.writes, time.Now(), false)
	f.writer.WaitReply(t, id, "", limit)
}

// Bridge publishes one message on the remote broker and waits until the
// bridge route delivered it to the local one.
func (f *Fleet) Bridge(t testing.TB, limit time.Duration) {
	t.Helper()
	got := make(chan struct{}, 1)
	sub := testmqtt.Connect(t, f.Local.URL, fmt.Sprintf("fleettest-sub-%d", time.Now().UnixNano()))
	tok := sub.Subscribe(downTarget, 1, func(paho.Client, paho.Message) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if !tok.WaitTimeout(limit) || tok.Error() != nil {
		t.Fatalf("fleettest: subscribe %s: %v", downTarget, tok.Error())
	}
	pub := testmqtt.Connect(t, f.Remote.URL, fmt.Sprintf("fleettest-pub-%d", time.Now().UnixNano()))
	if tok := pub.Publish(downSource, 1, false, "probe"); !tok.WaitTimeout(limit) || tok.Error() != nil {
		t.Fatalf("fleettest: publish %s: %v", downSource, tok.Error())
	}
	select {
	case <-got:
	case <-time.After(limit):
		t.Fatalf("fleettest: %s did not arrive as %s within %s", downSource, downTarget, limit)
	}
}
