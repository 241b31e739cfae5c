package etcdembed

import (
	"log/slog"
	"sync/atomic"

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
