package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
)

// The README's first command: the demo (built beside leasebridge, as
// scripts/demo builds it) runs two bridge processes, kills the owner and reports a takeover inside the admitted budget with
// one PLC connection at a time. The demo itself compares its measurements
// with the budget; this test checks that it did and printed them.
func TestDemoTakesOverWithinBudget(t *testing.T) {
	bin := testbin.Demo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"took over plc-1 at epoch", "peak concurrent PLC connections:                       1",
		"RESULT: takeover within the admitted budget, and the PLC never saw two clients"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	seconds := func(re string) float64 {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("demo output does not match %s:\n%s", re, text)
		}
		f, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The budget's terms as admission computes them for the demo's
	// configuration, each with its value.
	y := fmt.Sprintf(demoConfig, "http://127.0.0.1:2379", "tcp://127.0.0.1:1883", "127.0.0.1:502", "bridge-a", "127.0.0.1:8080")
	cfg, err := routes.Parse("demo.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	built, errs := preflight.Build(cfg, true)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	rep := built.Admit()[0]
	for _, term := range rep.OwnerDeath.Terms {
		if !regexp.MustCompile(`(?m)^  ` + term.Name + ` +` + regexp.QuoteMeta(admission.FormatSeconds(term.Value)) + `  \S`).MatchString(text) {
			t.Errorf("demo output lacks the term %s = %s with its meaning", term.Name, admission.FormatSeconds(term.Value))
		}
	}
	for _, re := range []string{
		`owner-death budget, ` + regexp.QuoteMeta(admission.FormatSeconds(rep.OwnerDeath.Total)) + `, is the worst case`,
		`epoch: the lease row's fencing number`,
		`(?m)^  published on demo/plc-1/\w+: \{.*"epoch":1\b.*\}$`,
		`(?m)^write request on demo-cmd/plc-1/write: \{"id":"demo-1","tag":"setpoint","value":1234,"issued_at":"[0-9TZ:.-]+"\}$`,
		`(?m)^  reply on demo-cmd/plc-1/reply: \{.*"id":"demo-1".*\}$`,
		`(?m)^  the PLC's holding register 1 \(setpoint\) now reads 1234$`,
		`(?m)^  first value at epoch 2, on demo/plc-1/\w+: \{.*"epoch":2\b.*\}$`,
		`only lease_ttl \(` + regexp.QuoteMeta(admission.FormatSeconds(rep.Timing.LeaseTTL)) + `\) is paid in full`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("demo output does not match %s", re)
		}
	}
	budget := seconds(`admitted owner-death budget: +([0-9.]+)s`)
	for _, re := range []string{`FailureToFullDuration \(bridge-., from its first observation of the stale row\): ([0-9.]+)s`,
		`kill -> first value published by the successor: +([0-9.]+)s`} {
		if got := seconds(re); got <= 0 || got > budget {
			t.Errorf("%s = %gs, admitted budget %gs", re, got, budget)
		}
	}
}

// --fleet-store: no etcd; three nodes each run `leasebridge store` and
// `leasebridge run`, the store reports itself healthy, the budget has the
// store_recovery term, and killing the owner's whole node (bridge and
// member) ends in a takeover within the budget with one PLC connection at
// a time, every process gone when the demo exits.
func TestDemoFleetStoreTakesOverWithinBudget(t *testing.T) {
	bin := testbin.Demo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--fleet-store", "--keep").CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("demo --fleet-store: %v\n%s", err, text)
	}
	for _, re := range []string{
		`(?m)^started .leasebridge store. on node-a, node-b and node-c: the fleet's own lease store, no etcd to install$`,
		`every member is reachable, without alarms, with one leader`,
		`(?m)^  store_recovery +[0-9.]+s  \S`,
		`(?m)^moved the store's leadership to node-.'s member \(etcd's MoveLeader\), so killing node-. kills the leader too$`,
		`(?m)^killed node-.: its bridge and its store member, the store's leader \(SIGKILL\); waiting for a standby$`,
		`(?m)^node-. took over plc-1 at epoch 2$`,
		`(?m)peak concurrent PLC connections: +1$`,
		`RESULT: takeover within the admitted budget, and the PLC never saw two clients`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("demo --fleet-store output does not match %s:\n%s", re, text)
		}
	}
	if strings.Contains(text, "embedded etcd") {
		t.Errorf("demo --fleet-store started an etcd of its own:\n%s", text)
	}
	m := regexp.MustCompile(`(?m)^working directory kept: (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no working directory in:\n%s", text)
	}
	t.Cleanup(func() { _ = os.RemoveAll(m[1]) })
	if left := processesIn(m[1]); len(left) > 0 {
		t.Errorf("processes of the demo still run after it exited: %v", left)
	}
}

// processesIn lists the live processes whose command line names dir.
func processesIn(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), dir) {
			out = append(out, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// SIGTERM or SIGINT while the bridges run: the demo kills its bridge
// processes, waits for them, removes its working directory and exits 128
// plus the signal number. scripts/demo, README's first command, announces
// its build first and passes the signal on.
func TestDemoSignalCleansUp(t *testing.T) {
	bin := testbin.Demo(t)
	started := regexp.MustCompile(`^started bridge-a \(pid (\d+)\) and bridge-b \(pid (\d+)\); their configurations and logs are in (\S+)$`)
	for _, c := range []struct {
		name string
		sig  syscall.Signal
		argv []string
	}{
		{"SIGTERM", syscall.SIGTERM, []string{bin}},
		{"SIGINT", syscall.SIGINT, []string{bin}},
		{"scripts/demo SIGTERM", syscall.SIGTERM, []string{"bash", "../../scripts/demo"}},
	} {
		sig := c.sig
		t.Run(c.name, func(t *testing.T) {
			// A pipe of our own, not StdoutPipe, so that Wait may run while
			// the output is read.
			out, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			stderrText := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Stdout, cmd.Stderr = w, stderr
			err = cmd.Start()
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				out.Close()
			})
			lines := make(chan string, 100)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			var pids []int
			var dir string
			var seen strings.Builder
			// Signal once both bridge processes run; later the demo kills
			// one of them itself.
			for line := range lines {
				seen.WriteString(line + "\n")
				if m := started.FindStringSubmatch(line); m != nil {
					a, _ := strconv.Atoi(m[1])
					b, _ := strconv.Atoi(m[2])
					pids, dir = []int{a, b}, m[3]
					break
				}
			}
			if len(pids) != 2 {
				t.Fatalf("the demo never reported its bridges:\n%s%s", seen.String(), stderrText())
			}
			for _, pid := range pids {
				if !bridgeRuns(pid) {
					t.Fatalf("bridge pid %d is not running before the signal", pid)
				}
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			// A bound against a hang, not a timing claim.
			select {
			case err = <-exited:
			case <-time.After(time.Minute):
				t.Fatalf("the demo did not exit within a minute of %v:\n%s%s", sig, seen.String(), stderrText())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Errorf("exit after %v: %v, want status %d\n%s", sig, err, 128+int(sig), stderrText())
			}
			for _, pid := range pids {
				if bridgeRuns(pid) {
					t.Errorf("bridge pid %d still runs after the demo exited", pid)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("working directory %s remains: %v", dir, err)
			}
			const notice = "building leasebridge (the first run downloads Go modules, which can take a few minutes)...\n"
			if c.argv[0] == "bash" && !strings.HasPrefix(stderrText(), notice) {
				t.Errorf("scripts/demo does not announce its build first:\n%s", stderrText())
			}
		})
	}
}

// bridgeRuns says whether pid is a live `leasebridge run` process.
func bridgeRuns(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "run\x00-c\x00")
}

// stderrFile is a file for a child's standard error and a reader of it.
func stderrFile(t *testing.T) (*os.File, func() string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, func() string { b, _ := os.ReadFile(f.Name()); return string(b) }
}

// TestDemoKeepNamesItsDirectoryFirst: `--keep` once named its kept
// directory only mid-run, and a signal's message did not name it. The
// first line names it, and so does the message of a SIGINT, after which
// the directory is still there.
func TestDemoKeepNamesItsDirectoryFirst(t *testing.T) {
	cmd := exec.Command(testbin.Demo(t), "--keep")
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, stderrText := stderrFile(t)
	cmd.Stdout, cmd.Stderr = w, stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		out.Close()
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("no output: %s", stderrText())
	}
	first := regexp.MustCompile(`^leasebridge-demo: working directory (\S+), kept at the end \(--keep\)$`).FindStringSubmatch(sc.Text())
	if first == nil {
		t.Fatalf("first line %q does not name the kept directory", sc.Text())
	}
	dir := first[1]
	t.Cleanup(func() { os.RemoveAll(dir) })
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "started bridge-a") {
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	// A bound against a hang, not a timing claim.
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the demo did not exit within a minute of SIGINT: %s", stderrText())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit after SIGINT: %v, want 130", err)
	}
	if !strings.Contains(stderrText(), "working directory kept: "+dir) {
		t.Errorf("the signal's message does not name the kept directory:\n%s", stderrText())
	}
	if _, err := os.Stat(filepath.Join(dir, "bridge-a.yaml")); err != nil {
		t.Errorf("kept directory: %v", err)
	}
}

// TestDemoScriptInterruptedWhileBuilding: a SIGTERM or SIGINT while
// scripts/demo builds once ended it without a word (and only after the
// build). A `go` that never finishes stands in for a first build
// downloading modules: the script stops it, says so and exits 128 + the
// signal.
func TestDemoScriptInterruptedWhileBuilding(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			fake := t.TempDir()
			pidFile := filepath.Join(fake, "go.pid")
			script := "#!/bin/sh\necho $$ > " + pidFile + "\nexec sleep 600\n"
			if err := os.WriteFile(filepath.Join(fake, "go"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "../../scripts/demo")
			cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"))
			stderr, stderrText := stderrFile(t)
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			var goPID int
			testbin.Observe(t, 30*time.Second, func() (bool, string) {
				b, err := os.ReadFile(pidFile)
				goPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil && goPID > 0, "the build did not start"
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("scripts/demo still runs 30 s after %v:\n%s", sig, stderrText())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Errorf("exit after %v: %v, want %d", sig, err, 128+int(sig))
			}
			if !strings.Contains(stderrText(), "interrupted while building leasebridge; nothing was started") {
				t.Errorf("scripts/demo said:\n%s", stderrText())
			}
			if syscall.Kill(goPID, 0) == nil {
				t.Errorf("the build (pid %d) still runs", goPID)
			}
		})
	}
}

// TestDemoInterruptedWhileBuildingSaysSo: without a leasebridge beside
// it (`go run ./cmd/leasebridge-demo`) the demo builds one; a SIGINT then
// once said "bridges killed". It says the build was interrupted.
func TestDemoInterruptedWhileBuildingSaysSo(t *testing.T) {
	alone := filepath.Join(t.TempDir(), "leasebridge-demo")
	src, err := os.ReadFile(testbin.Demo(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, src, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "go"), []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(alone)
	cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"))
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, stderrText := stderrFile(t)
	cmd.Stdout, cmd.Stderr = w, stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		out.Close()
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "building leasebridge into") {
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the demo did not exit within a minute of SIGINT: %s", stderrText())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit after SIGINT: %v, want 130", err)
	}
	if !strings.Contains(stderrText(), "interrupted while building leasebridge; nothing was started, working directory removed") {
		t.Errorf("the demo said:\n%s", stderrText())
	}
}
