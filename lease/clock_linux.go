//go:build linux

package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

var bootClock = func() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}()

// Now is the manager's clock: CLOCK_BOOTTIME, which keeps counting while
// the machine is suspended, so a fence deadline passes during a suspend.
// Go's own monotonic clock stops then.
func Now() time.Duration {
	if !bootClock {
		return fallbackNow()
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) // probed at start
	return time.Duration(ts.Nano())
}
