// Package hook lets the lease simulation switch a Core into deliberately
// broken modes, to prove the simulation catches them. Only a build with
// -tags leasemutants installs SetFenceMode (lease/mutants_on.go); in any
// other build it is nil and no Core has a broken mode to switch to.
package hook

// Modes for SetFenceMode: the correct core and deliberately broken ones.
const (
	FenceCorrect      = 0 // deadline = last successful renew sent + FenceAfter
	FenceNever        = 1 // broken: the owner never fences itself
	FenceFromResponse = 2 // broken: deadline anchored at the renew response
	FenceNoHold       = 3 // broken: a fenced owner reclaims before its old term has closed
	OwnTTLOnly        = 4 // broken: a standby judges a row by its own lease_ttl, ignoring the owner's
)

// SetFenceMode sets the fence mode of a *lease.Core; installed by package
// lease when built with -tags leasemutants, nil otherwise.
var SetFenceMode func(core any, mode int)
