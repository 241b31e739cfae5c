package main

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
)

// aboutText fills an about format with the exit statuses from the code.
func aboutText(format string) string {
	if !strings.Contains(format, "%[") {
		return strings.TrimSpace(format) // Sprintf would flag the unused values
	}
	return strings.TrimSpace(fmt.Sprintf(format, exitOK, exitRefused, exitInvalid, exitcode.StepDown,
		signalExit(syscall.SIGINT), signalExit(syscall.SIGTERM), exitcode.Failure))
}

// signalExit is the exit status of a command ended by sig: 128 + its number.
func signalExit(sig syscall.Signal) int { return 128 + int(sig) }

// The per-command help that `leasebridge help COMMAND` and
// `leasebridge COMMAND -h` print, with the flags between about and
// examples.

// The about texts are formats: %[1]d is exitOK, %[2]d exitRefused, %[3]d
// exitInvalid, %[4]d exitcode.StepDown, %[5]d and %[6]d the
// exits on SIGINT and SIGTERM, %[7]d exitcode.Failure (see aboutText).

const runAbout = `
The bridge. Admission runs first: a configuration it refuses exits %[2]d before
any lease store or transport is opened, an invalid one exits %[3]d. Then one
startup line per session with its owner-death budget and
broker_path_failover; /metrics, /healthz, /readyz, /sessions and /fleet on
http_listen.
SIGTERM or SIGINT ends every ownership term and releases every lease (exit
%[1]d; exit %[7]d when a release fails, and standbys take over after
lease_ttl); a broker-path step-down releases everything and exits %[4]d, to be
restarted as a standby. A standalone node without lease_store.endpoints runs
an embedded single-member etcd in data_dir.

Every certificate, key and password file the configuration names must be
readable, and every password_env variable set. Passwords, also those written
inside a URL (mqtt://user:password@host:1883), never reach the log.
`

const runExamples = `  # JSON logs for a log collector (systemd, Kubernetes)
  leasebridge run -c /etc/leasebridge/config.yaml
  # readable logs with the lease and connection details, at a terminal
  leasebridge run -c config.yaml --log-format text --log-level debug
`

const admitAbout = `
The dry run for CI: reads the one configuration file, decodes it strictly,
builds every transport without opening any, and computes both failover
budgets of every session. It opens no socket, no lease store and no device.
Certificate, key and password files may be absent and password_env variables
unset (run requires them; admit notes them).

Exit status: %[1]d every session admitted, %[2]d a session refused, %[3]d the
configuration is invalid or unreadable, or the command line is wrong.

--format text prints the report for people (problems on standard error, one
per line as file:line:column: key.path: message); json prints the document
of docs/admit-json.md; github prints GitHub Actions workflow commands
(::error for every problem and refusal, ::notice for every admitted
session's budget), so that a pull request shows them on the lines of the
configuration file.
`

const admitExamples = `  # the report for people
  leasebridge admit -c config.yaml
  # machine-readable (docs/admit-json.md); --json is the same
  leasebridge admit -c config.yaml --format json
  # annotations on the configuration file in a GitHub Actions job
  leasebridge admit -c deploy/config.yaml --format github
`

const budgetAbout = `
A shipped lease profile's budgets at the MQTT transport's defaults and
startup_allowance 0: the resolved lease cadence and every term of the
owner-death and broker-path budgets. --json prints the same as JSON,
--markdown the table of docs/failover-budget.md (every profile unless
--profile names one); --json and --markdown exclude each other.
`

const budgetExamples = `  # the clustered profile, term by term
  leasebridge budget --profile clustered
  # both profiles as JSON
  leasebridge budget --profile all --json
  # the Markdown table row of the standalone profile
  leasebridge budget --profile standalone --markdown
`
