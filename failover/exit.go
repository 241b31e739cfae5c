// Package failover runs each session through standby, owner, activation and
// service, and steps the whole process down when its broker path stays lost.
package failover

// ExitStepDown is the process exit status after a broker-path step-down:
// every lease was released and the orchestrator should start the process
// again as a standby. It is EX_TEMPFAIL from sysexits.h, so systemd's
// Restart=always and Kubernetes restart it like any other failure, and an
// operator can tell it apart in the unit's status.
const ExitStepDown = 75

// GCPercent is the garbage collector's target that `leasebridge run` sets
// when GOGC is not in its environment (GOGC and GOMEMLIMIT, when set, win).
// Go counts goroutine stacks in the heap goal, and a bridge is mostly idle
// connections, each with a handful of goroutines: at Go's default of 100 the
// heap may grow by its live size plus all those stacks before a collection,
// and the memory freed after the takeover burst is kept for that growth.
// At 50 a process holding 1,000 sessions stays under 150 MB resident for
// about the same idle CPU (docs/benchmarks.md).
const GCPercent = 50
