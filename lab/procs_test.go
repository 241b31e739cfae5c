package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"

	// The transports of every kind, which admission builds.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

// bridge is one `leasebridge run` process slot: its configuration, its
// own mosquitto, the fault proxy on its broker path and one fault proxy
// per etcd member on its store path. A slot is restarted (a new process, a
// new lease identity) after a trial ended it, the way systemd or
// Kubernetes would.
type bridge struct {
	*proc
	http    string
	cfgPath string
	broker  *testmqtt.Mosquitto
	proxy   *faultproxy.Proxy
	store   storePath
	spec    testbin.Bridge
	// yaml, when set, is the slot's configuration instead of
	// testbin.Config(spec), with sessions sessions (1 otherwise).
	yaml     string
	sessions int

	// report and inputs are admission's for the configuration the next
	// process starts with (lease_ttl changes in the rolling trials).
	report admission.Report
	inputs admission.Inputs

	logMu  sync.Mutex
	logOff int64     // bytes of the log file parsed so far
	lines  []logLine // every JSON line with a msg, in order
}

func newBridge(t *testing.T, dir, name string, store storePath, plcAddr string, broker *testmqtt.Mosquitto, proxy *faultproxy.Proxy) *bridge {
	t.Helper()
	b := newSlot(t, dir, name, store, broker, proxy)
	b.spec = testbin.Bridge{Etcd: store.endpoints(), Broker: "tcp://" + proxy.Addr(), PLC: plcAddr, Node: name, HTTP: b.http,
		KeyPrefix: "/lab/", Topic: "lab/{device}/{tag}"}
	if err := b.configure(0); err != nil {
		t.Fatal(err)
	}
	return b
}

// newSlot is a process slot without a configuration yet; its process, if
// any, is killed when the test ends.
func newSlot(t *testing.T, dir, name string, store storePath, broker *testmqtt.Mosquitto, proxy *faultproxy.Proxy) *bridge {
	t.Helper()
	return &bridge{proc: newProc(t, name, filepath.Join(dir, name+".log")), http: testbin.FreeAddr(t), cfgPath: filepath.Join(dir, name+".yaml"),
		broker: broker, proxy: proxy, store: store, sessions: 1}
}

// proc is one slot's process, started again (a new process) after a
// trial ended it, the way systemd or Kubernetes would.
type proc struct {
	name    string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exit   int
	exitAt time.Time
	frozen bool
	starts int
}

// newProc is an empty slot whose process, if any, is killed when the
// test ends.
func newProc(t *testing.T, name, logPath string) *proc {
	p := &proc{name: name, logPath: logPath}
	t.Cleanup(p.kill)
	return p
}

// baseTTL is the lease_ttl of testbin.Config, which every slot runs
// with except during a rolling change.
const baseTTL = "lease_ttl: 2s"

// configure writes the slot's configuration for the next process: the
// shared one, with lease_ttl replaced unless leaseTTL is 0, and admits it.
func (b *bridge) configure(leaseTTL time.Duration) error {
	y := testbin.Config(b.spec)
	if b.yaml != "" {
		y = b.yaml
	}
	if leaseTTL > 0 {
		if strings.Count(y, baseTTL) != 1 {
			return fmt.Errorf("%s: the shared configuration has no single %q to change", b.name, baseTTL)
		}
		y = strings.Replace(y, baseTTL, "lease_ttl: "+leaseTTL.String(), 1)
	}
	if err := os.WriteFile(b.cfgPath, []byte(y), 0o600); err != nil {
		return err
	}
	cfg, err := routes.Parse(b.cfgPath, []byte(y))
	if err != nil {
		return err
	}
	built, errs := preflight.Build(cfg, false)
	if len(errs) > 0 {
		return errs
	}
	sessions := built.Sessions()
	reps := routes.AdmitSessions(sessions)
	if len(reps) != b.sessions {
		return fmt.Errorf("%s: %d sessions admitted, want %d", b.name, len(reps), b.sessions)
	}
	for _, r := range reps {
		if !r.Admitted() {
			return fmt.Errorf("%s: lab configuration not admitted: %+v", b.name, r)
		}
	}
	if leaseTTL > 0 && reps[0].Timing.LeaseTTL != leaseTTL {
		return fmt.Errorf("%s: admitted lease_ttl %s, want %s", b.name, reps[0].Timing.LeaseTTL, leaseTTL)
	}
	b.report, b.inputs = reps[0], sessions[0].Inputs
	return nil
}

// ttl is the lease_ttl of the slot's current configuration.
func (b *bridge) ttl() time.Duration { return b.report.Timing.LeaseTTL }

// start runs a new `leasebridge run` process in the slot.
func (b *bridge) start(t *testing.T) {
	t.Helper()
	b.proc.start(t, "run", "-c", b.cfgPath, "--log-format", "json")
}

// start runs a new leasebridge process with args in the slot; its log is
// appended to the slot's log file.
func (b *proc) start(t *testing.T, args ...string) {
	t.Helper()
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testbin.Leasebridge(t), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Not under systemd here, whatever the environment says.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") && !strings.HasPrefix(kv, "WATCHDOG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", b.name, err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done, b.exit, b.exitAt, b.frozen = cmd, done, -1, time.Time{}, false
	b.starts++
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		at := time.Now()
		code := -1
		var ee *exec.ExitError
		switch {
		case err == nil:
			code = 0
		case errors.As(err, &ee):
			code = ee.ExitCode() // -1 when killed by a signal
		}
		logf.Close()
		b.mu.Lock()
		if b.cmd == cmd {
			b.exit, b.exitAt = code, at
		}
		b.mu.Unlock()
		close(done)
	}()
}

// kill ends the slot's process, frozen or not, and waits for it.
func (b *proc) kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-done
}

// running reports whether the slot's process has not exited.
func (b *proc) running() bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (b *proc) signal(sig syscall.Signal) error {
	b.mu.Lock()
	cmd := b.cmd
	switch sig {
	case syscall.SIGSTOP:
		b.frozen = true
	case syscall.SIGCONT:
		b.frozen = false
	}
	b.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s: no process", b.name)
	}
	return cmd.Process.Signal(sig)
}

func (b *proc) isFrozen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frozen
}

// waitExit waits for the process to end and returns its exit status (-1
// for a signal) and when it ended.
func (b *proc) waitExit(limit time.Duration) (int, time.Time, error) {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	select {
	case <-done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.exit, b.exitAt, nil
	case <-time.After(limit):
		return -1, time.Time{}, fmt.Errorf("%s did not exit within %s", b.name, limit)
	}
}

var httpClient = &http.Client{Timeout: 500 * time.Millisecond}

// status reads the process's /readyz; ok is false when it does not answer.
func (b *bridge) status() (failover.SessionStatus, bool) {
	if !b.running() || b.isFrozen() {
		return failover.SessionStatus{}, false
	}
	resp, err := httpClient.Get("http://" + b.http + "/readyz")
	if err != nil {
		return failover.SessionStatus{}, false
	}
	defer resp.Body.Close()
	var body struct {
		Sessions []failover.SessionStatus `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Sessions) != 1 {
		return failover.SessionStatus{}, false
	}
	return body.Sessions[0], true
}

// logLine is the part of a JSON log line the lab reads.
type logLine struct {
	Time  time.Time `json:"time"`
	Msg   string    `json:"msg"`
	Epoch uint64    `json:"epoch"`
	Cause string    `json:"cause"`
	// Event is an "ownership ended" line's kind (fenced, lost).
	Event string `json:"event"`
}

// logEvents returns the slot's log lines with message msg, in order. It
// reads only what was appended since its last call.
func (b *bridge) logEvents(msg string) []logLine {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	b.readLogLocked()
	var out []logLine
	for _, l := range b.lines {
		if l.Msg == msg {
			out = append(out, l)
		}
	}
	return out
}

// readLogLocked parses the complete lines appended to the log file since
// the last read.
func (b *bridge) readLogLocked() {
	f, err := os.Open(b.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, b.logOff, 1<<40))
	if err != nil {
		return
	}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return
	}
	b.logOff += int64(end + 1)
	for _, line := range bytes.Split(data[:end], []byte("\n")) {
		var l logLine
		if bytes.Contains(line, []byte(`"msg":"`)) && json.Unmarshal(line, &l) == nil && l.Msg != "" {
			b.lines = append(b.lines, l)
		}
	}
}

// activation is the term's activation as its owner logged it: from
// "became owner" to "ServiceLevelFull" at epoch. A process writes its log
// after it acts, so a caller that knows the term began waits for the
// lines (waitLogged) rather than reading once.
func (b *bridge) activation(epoch uint64) (time.Duration, bool) {
	var became, full time.Time
	for _, l := range b.logEvents("became owner") {
		if l.Epoch == epoch {
			became = l.Time
		}
	}
	for _, l := range b.logEvents("ServiceLevelFull") {
		if l.Epoch == epoch {
			full = l.Time
		}
	}
	if became.IsZero() || full.IsZero() {
		return 0, false
	}
	return full.Sub(became), true
}

// logged reports whether the slot logged msg at epoch.
func (b *bridge) logged(msg string, epoch uint64) bool {
	for _, l := range b.logEvents(msg) {
		if l.Epoch == epoch {
			return true
		}
	}
	return false
}

// poll evaluates cond every pollEvery until it holds or ctx ends; what
// the lab reads from processes (logs, /readyz, the device) is written
// asynchronously, so it waits for the condition instead of reading once.
func poll(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := sleepCtx(ctx, pollEvery); err != nil {
			return err
		}
	}
	return nil
}

// pollEvery is how often the lab re-reads a process's output while it
// waits for a condition.
const pollEvery = 20 * time.Millisecond

// tail is the end of the slot's log, for failure messages.
func (b *proc) tail(n int) string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
