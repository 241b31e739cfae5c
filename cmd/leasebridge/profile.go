package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
)

// profileDirEnv names the directory into which `leasebridge run` writes
// its heap and goroutine profiles each time it receives SIGUSR1. Unset (the
// default) the process installs no handler and SIGUSR1 keeps Go's default
// action. The profiles go to a local directory only: nothing is served, so
// no unauthenticated endpoint exposes the process's memory.
const profileDirEnv = "LEASEBRIDGE_PROFILE_DIR"

// profiledRate is the heap profile's sampling rate while profiling: one
// sample per 4 KiB allocated rather than Go's 512 KiB, so that objects of
// a few hundred bytes per session are told apart.
const profiledRate = 4096

func init() {
	if os.Getenv(profileDirEnv) != "" {
		runtime.MemProfileRate = profiledRate
	}
}

// profileOnSignal writes heap.pprof (in use and allocated, after a
// collection) and goroutine.pprof into $LEASEBRIDGE_PROFILE_DIR at every
// SIGUSR1 until ctx ends; it does nothing when the variable is unset.
func profileOnSignal(ctx context.Context, log *slog.Logger) {
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sigs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				if err := writeProfiles(dir); err != nil {
					log.Warn("profiles not written", "dir", dir, "err", err)
					continue
				}
				log.Info("profiles written", "dir", dir)
			}
		}
	}()
}

// writeProfiles writes the heap profile, after a collection so in-use
// figures are current, and the goroutine profile into dir, each as a
// pprof file and as text; heap.txt ends with the runtime's memory
// statistics (stacks, heap idle and released, runtime metadata).
func writeProfiles(dir string) error {
	runtime.GC()
	for _, p := range []struct {
		name, file string
		debug      int
	}{{"heap", "heap.pprof", 0}, {"heap", "heap.txt", 1}, {"goroutine", "goroutine.pprof", 0}} {
		path := filepath.Join(dir, p.file)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("profile %s: %w", path, err)
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("profile %s: %w", path, err)
		}
	}
	return nil
}
