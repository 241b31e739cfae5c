package lease

import "time"

var clockStart = time.Now()

// fallbackNow is Go's monotonic clock as a duration since process start,
// offset by one hour so it never reads as the zero instant.
func fallbackNow() time.Duration { return time.Since(clockStart) + time.Hour }
