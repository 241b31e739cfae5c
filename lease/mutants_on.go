//go:build leasemutants

package lease

import (
	"time"

	"github.com/leasebridge/leasebridge/lease/internal/hook"
)

// mutation is the broken fence mode leasesim switched on through
// lease/internal/hook. This file is compiled only with -tags leasemutants,
// so no release carries a core that can be told not to fence.
type mutation struct{ mode int }

func init() {
	hook.SetFenceMode = func(c any, mode int) { c.(*Core).mut.mode = mode }
}

// on reports whether a broken mode is switched on. With one on, an
// authoritative read that adopts an unacknowledged renew does not move
// the deadline back either.
func (m mutation) on() bool { return m.mode != hook.FenceCorrect }

// mutHold: FenceNoHold reclaims at once after a fence, before the fenced
// term's transports have surely closed.
func (c *Core) mutHold(now, hold time.Duration) time.Duration {
	if c.mut.mode == hook.FenceNoHold {
		return now
	}
	return hold
}

// mutWait: OwnTTLOnly judges a row by this node's own lease_ttl, ignoring
// the longer one its owner wrote.
func (c *Core) mutWait(wait time.Duration) time.Duration {
	if c.mut.mode == hook.OwnTTLOnly {
		return c.cfg.LeaseTTL
	}
	return wait
}

// mutFence: FenceNever never fences; FenceFromResponse anchors the
// deadline at the renew's response instead of its send.
func (c *Core) mutFence(now, deadline time.Duration) time.Duration {
	switch c.mut.mode {
	case hook.FenceNever:
		return Never
	case hook.FenceFromResponse:
		return now + c.cfg.FenceAfter
	}
	return deadline
}
