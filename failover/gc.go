package failover

// GCPercent is the garbage collector's target that `leasebridge run` sets
// when GOGC is not in its environment (GOGC and GOMEMLIMIT, when set, win).
// Go counts goroutine stacks in the heap goal, and a bridge is mostly idle
// connections, each with a handful of goroutines: at Go's default of 100 the
// heap may grow by its live size plus all those stacks before a collection,
// and the memory freed after the takeover burst is kept for that growth.
// At 50 a process holding 1,000 sessions stays under 150 MB resident for
// about the same idle CPU (docs/benchmarks.md).
const GCPercent = 50
