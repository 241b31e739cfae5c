package testbin

import (
	"testing"
	"time"
)

// Observe polls probe every 5 ms until it reports ok and returns when that
// was first seen and the longest single probe: the observation's own
// latency, which grows on a loaded machine and belongs beside any bound
// the observation is judged against. Past limit it fails the test with
// probe's last word.
func Observe(tb testing.TB, limit time.Duration, probe func() (ok bool, last string)) (time.Time, time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	var lag time.Duration
	for {
		start := time.Now()
		ok, last := probe()
		lag = max(lag, time.Since(start))
		if ok {
			return time.Now(), lag
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not seen within %s: %s", limit, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
