//go:build !linux

package lease

import "time"

// Now is the manager's clock. Outside Linux it is Go's monotonic clock,
// which may stop while the machine is suspended; a watchdog must bound
// such pauses there.
func Now() time.Duration { return fallbackNow() }
