//go:build unix

package etcdembed

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
)

// lockDir takes an exclusive, non-blocking lock on dir + ".lock" for the
// life of the member. etcd's own lock on its database would make a second
// process on the same directory wait forever; this one fails at once.
func lockDir(dir string) (unlock func(), err error) {
	path := dir + ".lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (%s held by another leasebridge run with the same data_dir)", ErrLocked, dir, path)
		}
		return nil, fmt.Errorf("etcdembed: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// warnFree logs a warning when the disk under dir has less free space than
// DiskNeed: the member starts, and fails with ErrDiskFull when it runs out.
func warnFree(log *slog.Logger, dir string) {
	var st syscall.Statfs_t
	if log == nil || syscall.Statfs(dir, &st) != nil {
		return
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < DiskNeed() {
		log.Warn("embedded lease store: little free disk in data_dir", "dir", dir,
			"free_mb", free/1e6, "may_need_mb", DiskNeed()/1e6)
	}
}
