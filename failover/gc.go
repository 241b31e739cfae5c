package failover

// GCPercent is the garbage collector's target that `leasebridge run` sets
// when GOGC is not in its environment (GOGC and GOMEMLIMIT, when set, win).
// Go counts goroutine stacks in the heap goal, and a bridge is mostly idle
// connections, each with a handful of goroutines: at Go's default of 100 the
// heap may grow by its live size plus all those stacks before a collection,
// and the runtime keeps about a tenth more than that goal resident, so the
// memory freed after the takeover burst stays for that growth. An idle
// bridge allocates little (renewals, polls, scrapes), so a tighter goal
// costs few collections: docs/benchmarks.md measures a process holding
// 1,000 sessions at 25, at 50 (the earlier setting) and at 100 in one run.
const GCPercent = 25
