//go:build !leasemutants

package lease

import "time"

// mutation is empty in a release: the deliberately broken fence modes
// that leasesim must catch exist only in a build with -tags leasemutants
// (mutants_on.go). Each method here is the correct behaviour and inlines
// to nothing.
type mutation struct{}

// on reports whether a broken mode is switched on: never in a release.
func (mutation) on() bool { return false }

// mutHold returns the post-fence hold: the correct one.
func (c *Core) mutHold(_, hold time.Duration) time.Duration { return hold }

// mutWait returns the takeover wait: the correct one.
func (c *Core) mutWait(wait time.Duration) time.Duration { return wait }

// mutFence returns the fence deadline: the correct one.
func (c *Core) mutFence(_, deadline time.Duration) time.Duration { return deadline }
