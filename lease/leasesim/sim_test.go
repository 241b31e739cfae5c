package leasesim

import (
	"bytes"
	"errors"
	"flag"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	flagSeeds = flag.Int("seeds", 10000, "number of seeds TestSeeds runs (short mode: 500)")
	flagSeed  = flag.Int64("seed", -1, "replay one seed with a full trace (TestReplay)")
	flagFed   = flag.Bool("all-fed", false, "TestReplay: every node reads in bulk")
	flagBatch = flag.Int("batch", BatchOff, "TestReplay: 0 renew per session, 1 half the nodes batched, 2 every node batched")
	// The 10,000 seeds per batching mode take minutes on a shared
	// machine; the default keeps `go test ./...` short.
	flagBatchSeeds = flag.Int("batch-seeds", 1000, "seeds per batching mode of TestBatchedSeeds (short mode: 200)")
	// TestSlowCalmTakeoversLive, per batching mode; like batch-seeds,
	// short by default.
	flagSlowSeeds = flag.Int("slow-seeds", 2000, "seeds per batching mode of TestSlowCalmTakeoversLive (short mode: 300)")
	flagMode      = flag.Int("fence-mode", FenceCorrect, "fence mode for TestReplay (other than 0 only with -tags leasemutants): 0 correct, 1 never, 2 response-anchored, 3 no hold, 4 own lease_ttl only")
)

// runSeeds runs seeds [0, n) on all CPUs and returns the first failure by
// seed order, with aggregated statistics.
func runSeeds(t *testing.T, n int, mode int) (*Failure, []Stats) {
	return runSeedsWith(t, n, Options{FenceMode: mode})
}

func runSeedsWith(t *testing.T, n int, base Options) (*Failure, []Stats) {
	t.Helper()
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first *Failure
		stats = make([]Stats, n)
		wg    sync.WaitGroup
	)
	// Leave a CPU to the rest of `go test ./...`: the real-etcd tests
	// running alongside measure durations.
	for range max(1, runtime.GOMAXPROCS(0)-1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				o := base
				o.Seed = uint64(i)
				st, err := Run(o)
				stats[i] = st
				var f *Failure
				if errors.As(err, &f) {
					mu.Lock()
					if first == nil || f.Seed < first.Seed {
						first = f
					}
					mu.Unlock()
					if base.FenceMode != FenceCorrect || base.ForgetCloseBound || base.ForgetDeferral {
						next.Store(int64(n)) // one catch is enough
					}
				} else if err != nil {
					t.Errorf("seed %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	return first, stats
}

// trace replays seed with a full trace and returns its last lines.
func trace(seed uint64, mode int, lines int) string {
	var b bytes.Buffer
	_, _ = Run(Options{Seed: seed, FenceMode: mode, Trace: &b})
	all := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(all) > lines {
		all = append([]string{"..."}, all[len(all)-lines:]...)
	}
	return strings.Join(all, "\n")
}

func TestSeeds(t *testing.T) {
	n := *flagSeeds
	if testing.Short() && n == 10000 {
		n = 500
	}
	start := time.Now()
	f, stats := runSeeds(t, n, FenceCorrect)
	if f != nil {
		t.Fatalf("%v\nreplay: go test ./lease/leasesim -run TestReplay -seed=%d -v\n%s", f, f.Seed, trace(f.Seed, FenceCorrect, 80))
	}
	var steps, takeovers, fed, probes int
	var od, rel, odLim, relLim time.Duration
	for _, s := range stats {
		steps += s.Steps
		takeovers += s.Takeovers
		fed += s.FedTakeovers
		probes += s.Probes
		if s.OwnerDeathLimit > 0 && float64(s.MaxOwnerDeath)/float64(s.OwnerDeathLimit) > float64(od)/float64(max(odLim, 1)) {
			od, odLim = s.MaxOwnerDeath, s.OwnerDeathLimit
		}
		if s.ReleaseLimit > 0 && float64(s.MaxRelease)/float64(s.ReleaseLimit) > float64(rel)/float64(max(relLim, 1)) {
			rel, relLim = s.MaxRelease, s.ReleaseLimit
		}
	}
	t.Logf("%d seeds in %v: %d steps, %d takeovers (%d by nodes reading in bulk), %d liveness probes; worst owner-death takeover %v of budget %v; worst release takeover %v of budget %v",
		n, time.Since(start).Round(time.Millisecond), steps, takeovers, fed, probes, od, odLim, rel, relLim)
	if probes == 0 {
		t.Fatal("no liveness probe ran")
	}
	if fed == 0 {
		t.Fatal("no node reading in bulk took a session over")
	}
}

// TestBulkReadsSafe: with every node reading in bulk the correct core
// passes; mutants_test.go checks that the broken fences are still caught
// there, so the simulated row source does not hide them.
func TestBulkReadsSafe(t *testing.T) {
	if f, _ := runSeedsWith(t, 500, Options{AllFed: true}); f != nil {
		t.Fatalf("%v\nreplay: go test ./lease/leasesim -run TestReplay -seed=%d -all-fed -v", f, f.Seed)
	}
}

// TestForgottenCloseBoundCaught: a fence that leaves no time for closing
// the transports is caught too.
func TestForgottenCloseBoundCaught(t *testing.T) {
	f, _ := runSeedsWith(t, 10000, Options{ForgetCloseBound: true})
	if f == nil {
		t.Fatal("fencing at lease_ttl - clock_rate_margin passed 10000 seeds")
	}
	t.Logf("caught: %v", f)
}

func TestDeterministic(t *testing.T) {
	for seed := uint64(0); seed < 5; seed++ {
		a, b := trace(seed, FenceCorrect, 1<<30), trace(seed, FenceCorrect, 1<<30)
		if a != b {
			t.Fatalf("seed %d: two runs differ", seed)
		}
	}
}

func TestReplay(t *testing.T) {
	if *flagSeed < 0 {
		t.Skip("pass -seed=N to replay a seed")
	}
	var b bytes.Buffer
	st, err := Run(Options{Seed: uint64(*flagSeed), FenceMode: *flagMode, AllFed: *flagFed, Batch: *flagBatch, Trace: &b})
	t.Log("\n" + b.String())
	t.Logf("stats: %+v", st)
	if err != nil {
		t.Fatal(err)
	}
}

// With spread, standbys that are not a row's drawn taker defer their
// takeover, also of the row its holder released in a handover: no seed
// finds two owners or a takeover over the owner-death (or release) budget
// with its takeover deferral (TestMutantSpread: a broken fence is still
// caught), and a budget that forgets the deferral is caught (the draws do name dead and
// stuck takers).
func TestSpreadDeferralSafeAndBudgeted(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 300
	}
	if f, _ := runSeedsWith(t, n, Options{Spread: true}); f != nil {
		t.Fatalf("%v\nreplay: Run(Options{Seed: %d, Spread: true})", f, f.Seed)
	}
	f, _ := runSeedsWith(t, 2000, Options{Spread: true, ForgetDeferral: true})
	if f == nil || (f.Kind != "liveness" && f.Kind != "release") {
		t.Fatalf("spread budgeted without its deferral: %v, want a liveness or release violation", f)
	}
	t.Logf("caught: %v", f)
}

// With batched renewals, on half the nodes (a fleet mixing both renew
// paths, as during the upgrade that introduces them) and on every node:
// no seed finds two owners or a takeover over its budget, the batches
// carry the renews, and a fence interval that forgets the close bound is
// still caught (mutants_test.go: the broken fences too).
func TestBatchedSeeds(t *testing.T) {
	n := *flagBatchSeeds
	if testing.Short() && n == 1000 {
		n = 200
	}
	for _, mode := range []struct {
		name  string
		batch int
	}{{"HalfTheNodes", BatchHalf}, {"AllNodes", BatchAll}} {
		t.Run(mode.name, func(t *testing.T) {
			start := time.Now()
			f, stats := runSeedsWith(t, n, Options{Batch: mode.batch})
			if f != nil {
				t.Fatalf("%v\nreplay: go test ./lease/leasesim -run TestReplay -seed=%d -batch=%d -v", f, f.Seed, mode.batch)
			}
			var batches, renews, nodes, takeovers, probes int
			for _, s := range stats {
				batches, renews, nodes = batches+s.Batches, renews+s.BatchedRenews, nodes+s.BatchedNodes
				takeovers, probes = takeovers+s.Takeovers, probes+s.Probes
			}
			t.Logf("%d seeds in %v: %d batched nodes, %d batch calls carrying %d renews, %d takeovers, %d liveness probes",
				n, time.Since(start).Round(time.Millisecond), nodes, batches, renews, takeovers, probes)
			if batches == 0 || renews <= batches || probes == 0 {
				t.Fatalf("batches %d, renews %d, probes %d: the batched path was not exercised", batches, renews, probes)
			}
		})
	}
	f, _ := runSeedsWith(t, 10000, Options{Batch: BatchAll, ForgetCloseBound: true})
	if f == nil {
		t.Fatal("batched, fencing at lease_ttl - clock_rate_margin passed 10000 seeds")
	}
	t.Logf("caught: %v", f)
}

// With every store path's round trip between half and one
// renew_call_timeout in the calm phases, every takeover's compare-and-swap
// times out after it landed (the read and it share one
// renew_call_timeout). The core adopts the landed row at its next Acquire,
// so every probed takeover still comes within its budget plus that one
// Acquire; a core that wrote again instead moved the row at every poll,
// and no takeover came (the lab's drop after a fence). No seed finds two
// owners either.
func TestSlowCalmTakeoversLive(t *testing.T) {
	n := *flagSlowSeeds
	if testing.Short() && n == 2000 {
		n = 300
	}
	for _, mode := range []struct {
		name  string
		batch int
	}{{"PerSession", BatchOff}, {"HalfTheNodesBatched", BatchHalf}} {
		t.Run(mode.name, func(t *testing.T) {
			start := time.Now()
			f, stats := runSeedsWith(t, n, Options{SlowCalm: true, Batch: mode.batch})
			if f != nil {
				t.Fatalf("%v\nreplay: Run(Options{Seed: %d, SlowCalm: true, Batch: %d})", f, f.Seed, mode.batch)
			}
			var takeovers, probes int
			var od, odLim time.Duration
			for _, s := range stats {
				takeovers, probes = takeovers+s.Takeovers, probes+s.Probes
				if s.OwnerDeathLimit > 0 && float64(s.MaxOwnerDeath)/float64(s.OwnerDeathLimit) > float64(od)/float64(max(odLim, 1)) {
					od, odLim = s.MaxOwnerDeath, s.OwnerDeathLimit
				}
			}
			t.Logf("%d seeds in %v: %d takeovers, %d liveness probes; worst owner-death takeover %v of limit %v",
				n, time.Since(start).Round(time.Millisecond), takeovers, probes, od, odLim)
			if probes == 0 {
				t.Fatal("no liveness probe ran")
			}
		})
	}
}
