// Package failover runs each session through standby, owner, activation and
// service, steps the whole process down when its broker path stays lost, and
// releases one session when its device path does.
package failover

// Exit statuses of `leasebridge run`. docs/operations.md lists them from
// ExitStatuses; `leasebridge admit` uses the same 0, 1 and 2.
const (
	// ExitOK: SIGTERM or SIGINT, every term closed in order and every
	// lease this process held released.
	ExitOK = 0
	// ExitFailure: admission refused a session, or a runtime failure: a
	// lease release that failed at shutdown, an embedded store that cannot
	// run, a lease store that cannot be reached at start-up with
	// authentication.
	ExitFailure = 1
	// ExitInvalid: the configuration or the command line is invalid,
	// including credentials the lease store refuses at start-up.
	ExitInvalid = 2
	// ExitStepDown is the process exit status after a broker-path
	// step-down: every lease was released and the orchestrator should start
	// the process again as a standby. It is EX_TEMPFAIL from sysexits.h, so
	// systemd's Restart=on-failure and Kubernetes restart it like any other
	// failure, and an operator can tell it apart in the unit's status.
	ExitStepDown = 75
)

// ExitStatus documents one exit status of `leasebridge run`.
type ExitStatus struct {
	// Code is the process exit status.
	Code int
	// When lists the cases that end the process with Code.
	When string
	// Do is what the operator does about it.
	Do string
}

// ExitStatuses is every exit status of `leasebridge run`, in order; the
// table in docs/operations.md is rendered from it.
var ExitStatuses = []ExitStatus{
	{ExitOK, "SIGTERM or SIGINT: every term was closed in order and every lease released (`stopped: every lease released`)",
		"nothing; a standby already took over"},
	{ExitFailure, "admission refused a session (before anything is opened); or a lease release failed at SIGTERM or SIGINT " +
		"(`lease release failed` per session, then `stopped: lease releases failed`: standbys take over after `lease_ttl`); " +
		"or the embedded store cannot run (its `data_dir` is locked by another process, the disk is full); " +
		"or the lease store is unreachable at start-up when it needs authentication",
		"read the `ERROR` line; `leasebridge admit -c FILE` shows the budgets; a restart retries"},
	{ExitInvalid, "invalid configuration or command line, including a lease store that refuses the configured credentials at start-up",
		"fix the file at the reported `file:line:column`, or the credentials"},
	{ExitStepDown, "broker-path step-down: the broker path stayed not converged for `broker_health_step_down`; every lease was released " +
		"(`stepped down: every lease released`; if the store did not confirm a release, `stepped down: lease releases failed` " +
		"and standbys take over after `lease_ttl`)",
		"let the orchestrator restart it (systemd `Restart=on-failure`, Kubernetes); it rejoins as a standby"},
}

// GCPercent is the garbage collector's target that `leasebridge run` sets
// when GOGC is not in its environment (GOGC and GOMEMLIMIT, when set, win).
// Go counts goroutine stacks in the heap goal, and a bridge is mostly idle
// connections, each with a handful of goroutines: at Go's default of 100 the
// heap may grow by its live size plus all those stacks before a collection,
// and the memory freed after the takeover burst is kept for that growth.
// At 50 a process holding 1,000 sessions stays under 150 MB resident for
// about the same idle CPU (docs/benchmarks.md).
const GCPercent = 50
