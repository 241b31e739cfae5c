// Package exitcode is the one table of the exit statuses of every
// leasebridge command: run, admit, the fleet commands (status,
// handover, drain, undrain) and store. The commands, their help and the generated
// docs all take the numbers from here.
package exitcode

// Exit statuses of `leasebridge run`. docs/operations.md lists them from
// Statuses; `leasebridge admit` uses the same 0, 1 and 2.
const (
	// OK: SIGTERM or SIGINT, every term closed in order and every
	// lease this process held released.
	OK = 0
	// Failure: admission refused a session, or a runtime failure: a
	// lease release that failed at shutdown, an embedded store that cannot
	// run, a lease store that cannot be reached at start-up with
	// authentication.
	Failure = 1
	// Invalid: the configuration or the command line is invalid,
	// including credentials the lease store refuses at start-up.
	Invalid = 2
	// StepDown is the process exit status after a broker-path
	// step-down: every lease was released and the orchestrator should start
	// the process again as a standby. It is EX_TEMPFAIL from sysexits.h, so
	// systemd's Restart=on-failure and Kubernetes restart it like any other
	// failure, and an operator can tell it apart in the unit's status.
	StepDown = 75
)

// Status documents one exit status of `leasebridge run`.
type Status struct {
	// Code is the process exit status.
	Code int
	// When lists the cases that end the process with Code.
	When string
	// Do is what the operator does about it.
	Do string
}

// Statuses is every exit status of `leasebridge run`, in order; the
// table in docs/operations.md is rendered from it.
var Statuses = []Status{
	{OK, "SIGTERM or SIGINT: every term was closed in order and every lease released (`stopped: every lease released`)",
		"nothing; a standby already took over"},
	{Failure, "admission refused a session (before anything is opened); or a lease release failed at SIGTERM or SIGINT " +
		"(`lease release failed` per session, then `stopped: lease releases failed`: standbys take over after `lease_ttl`); " +
		"or the embedded store cannot run (its `data_dir` is locked by another process, the disk is full); " +
		"or the lease store is unreachable at start-up when it needs authentication",
		"read the `ERROR` line; `leasebridge admit -c FILE` shows the budgets; fix the cause, then restart it: " +
			"Kubernetes restarts the pod, but the shipped systemd unit does not restart on 1 (`RestartPreventExitStatus=1 2`), " +
			"since a refused file would only be refused again"},
	{Invalid, "invalid configuration or command line, including a lease store that refuses the configured credentials at start-up, " +
		"a lease store user that may not read and write a key the node needs (the message names the user, the key and the permission), " +
		"and a node name another live process runs (both identities named)",
		"fix the file at the reported `file:line:column`, the credentials or the user's role, or give each process its own `node`"},
	{StepDown, "broker-path step-down: the broker path stayed not converged for `broker_health_step_down`; every lease was released " +
		"(`stepped down: every lease released`; if the store did not confirm a release, `stepped down: lease releases failed` " +
		"and standbys take over after `lease_ttl`)",
		"let the orchestrator restart it (systemd `Restart=on-failure`, Kubernetes); it rejoins as a standby"},
}

// Exit statuses of `leasebridge admit`: OK (0) when every session is
// admitted, Invalid (2) for an invalid configuration or command line, and
// Refused.
const (
	// Admitted: every session admitted (the same 0 as OK).
	Admitted = OK
	// Refused: admission refused a session.
	Refused = 1
)

// Exit statuses of `leasebridge status`, `handover`, `drain` and
// `undrain` beyond OK (0) and Invalid (2).
const (
	// NotOwned: status found a session nobody owns; handover was
	// refused or the row did not change hands within the budget.
	NotOwned = 1
	// StoreDown: the lease store could not be read or written.
	StoreDown = 3
)

// Exit statuses of `leasebridge store` and its subcommands: OK (0),
// Invalid (2), StoreDown (3) for a subcommand that reached no member, and
// StoreFailed. docs/operations.md lists them from StoreStatuses.
const (
	// StoreFailed: the member failed while running or could not start;
	// members: one is unhealthy; replace: the member still answers.
	StoreFailed = 1
)

// StoreStatuses is every exit status of `leasebridge store`, in order.
var StoreStatuses = []Status{
	{OK, "SIGTERM or SIGINT stopped the member; a subcommand did what it says (members: every member reachable, no alarm, one leader)", "nothing"},
	{StoreFailed, "the member failed while running or could not start (its data directory locked by another process, the disk full); " +
		"`members`: a member is unreachable, raised an alarm, or there is no leader; `replace`: the member still answers",
		"read the `ERROR` line; a restart retries a failed member; stop a member before replacing it"},
	{Invalid, "invalid configuration or usage; or a start refused until an operator acts: the node is not in `lease_store.members`, " +
		"its member list differs from the cluster's (both named), its data was wiped (the message names `store replace`), " +
		"its data directory belongs to another member or cluster",
		"fix the file or follow the message; restarting alone does not help"},
	{StoreDown, "a subcommand reached no member", "check the members' processes and network; `store members` names each"},
}
