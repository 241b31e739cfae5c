package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/leasebridge/leasebridge/admission"
)

// Config is one session's lease cadence as admission resolved it.
type Config struct {
	LeaseTTL            time.Duration
	RenewInterval       time.Duration
	RenewJitter         time.Duration
	RenewCallTimeout    time.Duration
	AcquirePollInterval time.Duration
	MaxRenewFails       int
	// FenceAfter is how long after sending its last successful renew the
	// owner context ends: admission.Report.FenceAfter.
	FenceAfter time.Duration
	// TakeoverDeferral is how much longer a standby told to defer
	// (Manager.Defer) waits before taking a row over:
	// admission.Report.TakeoverDeferral, 0 without spread.
	TakeoverDeferral time.Duration
}

// ConfigFromReport takes the cadence and the fence interval from an
// admitted report.
func ConfigFromReport(r admission.Report) Config {
	t := r.Timing
	return Config{
		LeaseTTL:            t.LeaseTTL,
		RenewInterval:       t.RenewInterval,
		RenewJitter:         t.RenewJitter,
		RenewCallTimeout:    t.RenewCallTimeout,
		AcquirePollInterval: t.AcquirePollInterval,
		MaxRenewFails:       t.MaxRenewFails,
		FenceAfter:          r.FenceAfter,
		TakeoverDeferral:    r.TakeoverDeferral,
	}
}

// RowTiming is the cadence this configuration writes into its rows.
func (c Config) RowTiming() RowTiming {
	return RowTiming{LeaseTTL: c.LeaseTTL, RenewInterval: c.RenewInterval, RenewCallTimeout: c.RenewCallTimeout,
		AcquirePollInterval: c.AcquirePollInterval, FenceAfter: c.FenceAfter}
}

// Validate rejects a configuration the core cannot run safely. It checks
// ranges only; whether the cadence meets its budgets is admission's job.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"lease_ttl", c.LeaseTTL}, {"renew_interval", c.RenewInterval},
		{"renew_call_timeout", c.RenewCallTimeout}, {"acquire_poll_interval", c.AcquirePollInterval},
		{"fence_after", c.FenceAfter},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%w: %s = %v must be > 0", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.RenewJitter < 0 || c.RenewJitter/2 >= c.RenewInterval {
		return fmt.Errorf("%w: lease_renew_jitter = %v must be >= 0 and half of it < renew_interval = %v", ErrInvalidConfig, c.RenewJitter, c.RenewInterval)
	}
	if c.TakeoverDeferral < 0 {
		return fmt.Errorf("%w: takeover_deferral = %v must be >= 0", ErrInvalidConfig, c.TakeoverDeferral)
	}
	if c.MaxRenewFails < 1 {
		return fmt.Errorf("%w: max_renew_fails = %d must be >= 1", ErrInvalidConfig, c.MaxRenewFails)
	}
	// A fence later than this lets a standby with a slightly fast clock
	// take over while the owner still serves.
	if limit := c.LeaseTTL - admission.ClockRateMargin(c.LeaseTTL); c.FenceAfter > limit {
		return fmt.Errorf("%w: fence_after = %v must be <= lease_ttl - clock_rate_margin = %v", ErrInvalidConfig, c.FenceAfter, limit)
	}
	if _, err := admission.PollBoundary(c.AcquirePollInterval); err != nil {
		return fmt.Errorf("%w: acquire_poll_interval: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Identity names one manager as a lease holder.
type Identity struct {
	// Node is the bridge's node name.
	Node string
	// Owner is Node plus a suffix new at every process start, so a
	// restarted process never mistakes its predecessor's row for its own.
	Owner string
}

var processSuffix = func() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; a time-based
		// suffix still differs between process starts.
		return fmt.Sprintf("%x", time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}()

// NewIdentity returns node's identity for this process.
func NewIdentity(node string) Identity {
	return Identity{Node: node, Owner: node + "#" + processSuffix}
}
