package etcdembed

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// etcd's warnings reach our log with their fields; its info does not.
func TestZapToSlog(t *testing.T) {
	// Synchronous: zap writes on the caller's goroutine.
	var buf bytes.Buffer
	lg := newZapLogger(slog.New(slog.NewTextHandler(&buf, nil)), t.TempDir(), nil, new(atomic.Bool))
	lg.Info("chatty")
	lg.With(zap.String("member", "m1")).Warn("slow fdatasync", zap.Int("took_ms", 1200))
	out := buf.String()
	if strings.Contains(out, "chatty") || !strings.Contains(out, `level=WARN msg="embedded lease store: slow fdatasync" component=embedded-etcd member=m1 took_ms=1200`) {
		t.Fatalf("log:\n%s", out)
	}
}

// A fatal error etcd logs (here a real ENOSPC from /dev/full) goes to
// OnFatal classified as a full disk, instead of zap's silent exit.
func TestFatalGoesToOnFatal(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, werr := f.Write([]byte("x"))
	got := make(chan error, 1)
	lg := newZapLogger(slog.New(slog.NewTextHandler(io.Discard, nil)), "/data", func(err error) {
		got <- err
		runtime.Goexit() // OnFatal must not return; the process would exit here
	}, new(atomic.Bool))
	go lg.Fatal("failed to create WAL", zap.Error(werr))
	if err := <-got; !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "/data") {
		t.Fatalf("OnFatal got %v, want ErrDiskFull naming the directory", err)
	}
	go lg.Panic("failed to commit tx", zap.Error(errors.New("write db: no space left on device")))
	if err := <-got; !errors.Is(err, ErrDiskFull) {
		t.Fatalf("OnFatal got %v after a panic-level log, want ErrDiskFull", err)
	}
}

// A second member on a locked directory fails at once with ErrLocked; a
// start whose context ends returns at once.
func TestLockAndCancel(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Start(context.Background(), dir); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second start: %v, want ErrLocked naming %s", err, dir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, t.TempDir()); !errors.Is(err, ErrNotReady) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled start: %v", err)
	}
}
