package etcdembed

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// LockDir takes the exclusive lock on dir + ".lock" that StartWith takes,
// for another package that runs an etcd member (lease/fleetstore): a
// second process on the same directory fails at once with ErrLocked.
func LockDir(dir string) (unlock func(), err error) { return lockDir(dir) }

// WarnFree logs a warning when the disk under dir has less free space
// than DiskNeed.
func WarnFree(log *slog.Logger, dir string) { warnFree(log, dir) }

// ZapLogger is the etcd logger StartWith gives its member: warnings and
// errors to log, fatal errors and panics to onFatal (classified), and
// everything below a panic to debug while quiet is set (the member
// closing).
func ZapLogger(log *slog.Logger, dir string, onFatal func(error), quiet *atomic.Bool) *zap.Logger {
	return newZapLogger(log, dir, onFatal, quiet)
}

// SetDisk gives cfg the disk settings above (WAL and snapshot files kept,
// backend quota, auto-compaction), which DiskNeed and docs/operations.md
// assume of every member this project runs.
func SetDisk(cfg *embed.Config) {
	cfg.MaxWalFiles, cfg.MaxSnapFiles = MaxWALFiles, MaxSnapFiles
	cfg.QuotaBackendBytes = QuotaBytes
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = fmt.Sprint(CompactionRetention)
}

// Stop closes a member started with ZapLogger's quiet flag, waiting at
// most CloseTimeout, and calls unlock once it has stopped: a member that
// does not stop in time is abandoned to the process exit. Call it once
// (embed panics on a second Close).
func Stop(e *embed.Etcd, unlock func(), quiet *atomic.Bool) {
	quiet.Store(true)
	done := make(chan struct{})
	go func() {
		e.Close()
		unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(CloseTimeout):
	}
}
