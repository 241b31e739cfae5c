package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Process is a `leasebridge run` process a test started with Run.
type Process struct {
	// Cmd is the running process.
	Cmd *exec.Cmd
	// Done is closed once the process has ended.
	Done    chan struct{}
	logFile string
}

// Run writes config to dir/node.yaml and runs `leasebridge run` on it,
// its output to dir/node.log. The process is killed when tb ends, and its
// log printed if tb failed, so a failing test shows why a node misbehaved.
func Run(tb testing.TB, dir, node, config string) *Process {
	tb.Helper()
	p := &Process{Done: make(chan struct{}), logFile: filepath.Join(dir, node+".log")}
	path := filepath.Join(dir, node+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	logf, err := os.Create(p.logFile)
	if err != nil {
		tb.Fatal(err)
	}
	p.Cmd = exec.Command(Leasebridge(tb), "run", "-c", path)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		tb.Fatal(err)
	}
	go func() { _ = p.Cmd.Wait(); logf.Close(); close(p.Done) }()
	tb.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.Done
		if tb.Failed() {
			tb.Logf("%s log:\n%s", node, p.Log())
		}
	})
	return p
}

// Log is the process's output so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logFile)
	return string(b)
}
