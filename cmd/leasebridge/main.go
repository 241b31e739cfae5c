// Command leasebridge keeps each exclusive industrial connection (Modbus,
// S7, OPC UA, an MQTT bridge) open on exactly one node of a fleet, with
// failover no slower than the budget admission prints.
//
//	leasebridge run -c FILE                 the bridge
//	leasebridge admit -c FILE [--json]      dry run for CI: opens nothing
//	leasebridge budget --profile NAME [--json|--markdown]
//	leasebridge demo                        a takeover against its budget
//	leasebridge status -c FILE [--json]     the fleet view from the lease store
//	leasebridge handover SESSION [--to NODE] -c FILE
//	leasebridge drain NODE -c FILE / undrain NODE -c FILE
//
// Exit status: 0 admitted (admit) or stopped cleanly with every lease
// released (run); 1 refused by admission or a runtime failure; 2 invalid
// configuration or usage; 75 (run) stepped down after the broker path
// stayed lost, to be restarted as a standby.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/leasebridge/leasebridge/internal/report"
)

// Exit statuses, shared with the generated docs.
const (
	exitOK      = report.ExitAdmitted
	exitRefused = report.ExitRefused
	exitInvalid = report.ExitInvalid
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  leasebridge run -c FILE [--log-format json|text]
                                            the bridge: admission, then serve every session
  leasebridge admit -c FILE [--json]        admission dry run: 0 admitted, 1 refused, 2 invalid
  leasebridge budget --profile NAME [--json | --markdown]
                                            a lease profile's budgets (standalone, clustered, all)
  leasebridge demo                          two bridges, one simulated PLC, a takeover measured
                                            against its admitted budget
  leasebridge status -c FILE [--json]       every session's owner, epoch, row age, timing and the
                                            live nodes: 0 all owned, 1 not, 2 invalid, 3 store down
  leasebridge handover SESSION [--to NODE] -c FILE
                                            planned handover through the lease store, within the
                                            printed budget: 0 handed over, 1 refused or late
  leasebridge drain NODE -c FILE            the node hands its sessions over and stops competing
  leasebridge undrain NODE -c FILE          it competes again
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitInvalid
	}
	switch args[0] {
	case "admit":
		return admit(args[1:], stdout, stderr)
	case "budget":
		return budget(args[1:], stdout, stderr)
	case "run":
		return runMain(args[1:], stdout, stderr)
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "status":
		return status(args[1:], stdout, stderr)
	case "handover":
		return handover(args[1:], stdout, stderr)
	case "drain":
		return drain("drain", true)(args[1:], stdout, stderr)
	case "undrain":
		return drain("undrain", false)(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "leasebridge: unknown command %q\n%s", args[0], usage)
	return exitInvalid
}

// newFlags returns a flag set that reports its own errors to stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fl := flag.NewFlagSet("leasebridge "+name, flag.ContinueOnError)
	fl.SetOutput(stderr)
	return fl
}

// parseFlags parses and refuses stray positional arguments.
func parseFlags(fl *flag.FlagSet, args []string) error {
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", fl.Arg(0))
		fmt.Fprintf(fl.Output(), "%s: %v\n", fl.Name(), err)
		return err
	}
	return nil
}

var errHelp = flag.ErrHelp

func flagStatus(err error) int {
	if errors.Is(err, errHelp) {
		return exitOK
	}
	return exitInvalid
}
