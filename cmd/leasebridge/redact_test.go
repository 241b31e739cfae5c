package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testbin"
)

// secret is the password written into every URL below; it must appear in
// no output at all.
const secret = "s3cretPW"

// A password inside an invalid URL (broker, lease store endpoint) is
// redacted in every admit format and in run's errors.
func TestInvalidURLPasswordsRedacted(t *testing.T) {
	cfg := writeConfig(t, `deployment_mode: clustered
lease_store: {endpoints: ["http://root:`+secret+`@127.0.0.1:notaport"]}
manager: {broker_health_step_down: "off"}
brokers:
  local: {url: "mqtt://user:`+secret+`@127.0.0.1:notaport"}
  other: {url: "user:`+secret+`@127.0.0.1:1883"}
devices:
  plc: {kind: modbus_tcp, address: "127.0.0.1:502", groups: [{name: g, interval: 1s, tags: [{name: t, register: holding, address: 0, type: uint16}]}]}
routes:
  - {name: a, session: a, kind: poll, device: plc, broker: local}
  - {name: b, session: b, kind: poll, device: plc, broker: other}
`)
	for _, args := range [][]string{
		{"admit", "-c", cfg}, {"admit", "-c", cfg, "--format", "json"}, {"admit", "-c", cfg, "--format", "github"},
		{"run", "-c", cfg}, {"run", "-c", cfg, "--log-format", "text"},
	} {
		code, out, errs := runCmd(t, args...)
		all := out + errs
		if code != exitInvalid || strings.Contains(all, secret) || strings.Count(all, "xxxxx@127.0.0.1") < 3 {
			t.Errorf("%q: exit %d; want %d, the three URLs redacted and no %q:\n%s", args, code, exitInvalid, secret, all)
		}
	}
}

// A running bridge whose broker and OPC UA device are unreachable, both
// named by URLs with a password, and whose lease store endpoint carries
// one too, logs the URLs (so the test sees them) with the password
// redacted, in JSON and in text.
func TestRunLogsRedactURLPasswords(t *testing.T) {
	p := startRunPeers(t)
	dead := testbin.FreeAddr(t) // nothing listens here
	etcd := strings.Replace(p.etcd.Endpoints[0], "http://", "http://root:"+secret+"@", 1)
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			y := fmt.Sprintf(`deployment_mode: clustered
node: redact-%[4]s
http_listen: %[5]s
lease_store: {endpoints: ["%[1]s"], key_prefix: /redact-%[4]s/}
manager: {lease_ttl: 2s, acquire_poll_interval: 200ms, renew_call_timeout: 200ms, broker_health_step_down: "off"}
brokers:
  good: {url: "%[2]s", connect_timeout: 300ms, reconcile_timeout: 300ms, unmatched_grace: 100ms, close_timeout: 100ms}
  dead: {url: "mqtt://user:%[6]s@%[3]s", connect_timeout: 300ms, reconcile_timeout: 300ms, unmatched_grace: 100ms, close_timeout: 100ms}
devices:
  plc: {kind: modbus_tcp, address: "%[7]s", connect_timeout: 300ms, request_timeout: 300ms, close_timeout: 100ms,
        groups: [{name: g, interval: 100ms, tags: [{name: t, register: holding, address: 0, type: uint16}]}]}
  ua: {kind: opcua, address: "opc.tcp://op:%[6]s@%[3]s", connect_timeout: 300ms, request_timeout: 300ms, close_timeout: 100ms,
       groups: [{name: g, interval: 100ms, tags: [{name: t, address: "ns=1;s=t", type: float64}]}]}
routes:
  - {name: to-dead-broker, session: a, kind: poll, device: plc, broker: dead}
  - {name: from-dead-device, session: b, kind: poll, device: ua, broker: good}
`, etcd, p.broker.URL, dead, format, testbin.FreeAddr(t), secret, p.plc.Addr())
			path := filepath.Join(t.TempDir(), "cfg.yaml")
			if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			sw := outputFile(t)
			cmd := exec.Command(testbin.Leasebridge(t), "run", "-c", path, "--log-format", format, "--log-level", "debug")
			cmd.Stdout, cmd.Stderr = sw.f, sw.f
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Both dead URLs reach the log: each session's activation fails.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for sw.count("mqtt://user:xxxxx@"+dead) == 0 || sw.count("opc.tcp://op:xxxxx@"+dead) == 0 || sw.count("root:xxxxx@") == 0 {
				select {
				case err := <-done:
					t.Fatalf("run exited: %v\n%s", err, sw.String())
				case <-ctx.Done():
					_ = cmd.Process.Kill()
					<-done
					t.Fatalf("the redacted URLs never reached the log:\n%s", sw.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				<-done
			}
			if out := sw.String(); strings.Contains(out, secret) {
				t.Errorf("the password reached the %s log:\n%s", format, out)
			}
		})
	}
}

// The logger itself redacts: a library's error that quotes a URL with its
// password is logged without it, as is a message or a list of endpoints.
func TestLoggerRedacts(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var b bytes.Buffer
		log, err := newLogger(&b, format, "debug")
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("dial mqtt://u:"+secret+"@h:1883", "err", fmt.Errorf("parse \"opc.tcp://u:%s@h:x\": invalid port", secret),
			"endpoints", []string{"http://root:" + secret + "@h:2379"}, "url", "ws://u:"+secret+"@h/mqtt")
		if out := b.String(); strings.Contains(out, secret) || strings.Count(out, "u:xxxxx@h") != 3 || !strings.Contains(out, "root:xxxxx@h:2379") {
			t.Errorf("%s log: %s", format, out)
		}
	}
	for _, bad := range [][2]string{{"xml", "info"}, {"json", "trace"}, {"", "info"}} {
		if _, err := newLogger(io.Discard, bad[0], bad[1]); err == nil {
			t.Errorf("newLogger(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// output is a process's output in a file, which the test may read while
// the process writes.
type output struct{ f *os.File }

func outputFile(t *testing.T) output {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return output{f}
}

func (o output) String() string {
	b, _ := os.ReadFile(o.f.Name())
	return string(b)
}

func (o output) count(s string) int { return strings.Count(o.String(), s) }
