// Package testbin builds the leasebridge binary once per test process and
// hands out loopback addresses, for tests that run `leasebridge run`
// processes (cmd, lab, bench).
package testbin

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Leasebridge returns the path of a leasebridge binary built from this
// tree, building it on first use.
func Leasebridge(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		dir, derr := os.MkdirTemp("", "leasebridge-bin-")
		if derr != nil {
			err = derr
			return
		}
		path = filepath.Join(dir, "leasebridge")
		out, berr := exec.Command("go", "build", "-o", path, "github.com/leasebridge/leasebridge/cmd/leasebridge").CombinedOutput()
		if berr != nil {
			err = fmt.Errorf("go build: %w\n%s", berr, out)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		tb.Fatal(lerr)
	}
	defer l.Close()
	return l.Addr().String()
}
