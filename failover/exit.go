// Package failover runs each session through standby, owner, activation and
// service, and steps the whole process down when its broker path stays lost.
package failover

// ExitStepDown is the process exit status after a broker-path step-down:
// every lease was released and the orchestrator should start the process
// again as a standby. It is EX_TEMPFAIL from sysexits.h, so systemd's
// Restart=always and Kubernetes restart it like any other failure, and an
// operator can tell it apart in the unit's status.
const ExitStepDown = 75
