//go:build leasemutants

package leasesim

import "testing"

// The deliberately broken fence modes exist only in this build (see
// lease/mutants_on.go); TestMutantsCaught runs these tests from a plain
// `go test`. Each name is listed in mutantTests.

// TestMutantNeverFences proves the safety assertion bites: with the
// self-fence switched off the simulation must find two owners.
func TestMutantNeverFences(t *testing.T) {
	f, _ := runSeeds(t, 2000, FenceNever)
	if f == nil {
		t.Fatal("a manager that never fences itself passed 2000 seeds: the safety check is blind")
	}
	if f.Kind != "safety" {
		t.Fatalf("broken fence caught as %s, want safety: %v", f.Kind, f)
	}
	t.Logf("caught: %v", f)
}

// TestMutantSubtle: anchoring the fence at the renew response instead of
// its send, reclaiming one's own row before the fenced term's transports
// have closed, and a standby that judges a row by its own lease_ttl alone
// (ignoring the longer one the owner wrote, which per-node timings
// exercise) are each caught.
func TestMutantSubtle(t *testing.T) {
	for _, tc := range subtleModes {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := runSeeds(t, 2000, tc.mode)
			if f == nil {
				t.Fatalf("broken mode %s passed 2000 seeds", tc.name)
			}
			t.Logf("caught: %v", f)
		})
	}
}

var subtleModes = []struct {
	name string
	mode int
}{{"ResponseAnchored", FenceFromResponse}, {"NoHoldAfterFence", FenceNoHold}, {"OwnTTLOnly", OwnTTLOnly}}

// TestMutantBulkReads: with every node reading in bulk the broken fences
// are still caught, so the simulated row source does not hide them.
func TestMutantBulkReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode int
	}{{"Never", FenceNever}, {"NoHoldAfterFence", FenceNoHold}, {"OwnTTLOnly", OwnTTLOnly}} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := runSeedsWith(t, 2000, Options{AllFed: true, FenceMode: tc.mode})
			if f == nil {
				t.Fatalf("broken mode %s passed 2000 seeds reading in bulk", tc.name)
			}
			t.Logf("caught: %v", f)
		})
	}
}

// TestMutantSpread: with spread's deferrals a broken fence is still caught
// as a safety violation.
func TestMutantSpread(t *testing.T) {
	f, _ := runSeedsWith(t, 1000, Options{Spread: true, FenceMode: FenceNever})
	if f == nil || f.Kind != "safety" {
		t.Fatalf("spread with a broken fence: %v, want a safety violation", f)
	}
	t.Logf("caught: %v", f)
}

// TestMutantBatched: with every node renewing in batches, each broken
// fence mode is still caught.
func TestMutantBatched(t *testing.T) {
	for _, tc := range append([]struct {
		name string
		mode int
	}{{"Never", FenceNever}}, subtleModes...) {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := runSeedsWith(t, 2000, Options{Batch: BatchAll, FenceMode: tc.mode})
			if f == nil {
				t.Fatalf("broken mode %s passed 2000 seeds renewing in batches", tc.name)
			}
			t.Logf("caught: %v", f)
		})
	}
}
