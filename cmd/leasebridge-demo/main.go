// Command leasebridge-demo is README's first command, run by scripts/demo:
// it starts an embedded etcd, an embedded MQTT broker and a simulated Modbus
// PLC behind a connection-counting proxy, runs two `leasebridge run`
// processes against them, shows a published value and a write to the PLC
// through the broker, kills the owner and prints the measured takeover
// beside the budget admission computed, term by term.
//
// It is its own command so that the broker, the PLC simulator and the fault
// proxy it links never ship in the leasebridge binary
// (cmd/leasebridge's TestShippedBinaryCarriesNoTestServers).
//
//	leasebridge-demo [--keep] [--leasebridge PATH] [--fleet-store]
//
// Exit status: 0 the takeover stayed within the budget and the PLC never
// saw two clients; 1 it did not, or a peer or bridge failed; 2 invalid
// usage; 130 or 143 after SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
)

// Exit statuses, from leasebridge's one table: the same numbers as admit's.
const (
	exitOK      = exitcode.OK
	exitRefused = exitcode.Refused
	exitInvalid = exitcode.Invalid
)

const about = `usage: leasebridge-demo [--keep] [--leasebridge PATH] [--fleet-store]

Starts an embedded etcd, an embedded MQTT broker and a simulated Modbus PLC
behind a connection-counting proxy, runs two 'leasebridge run' processes
against them, shows a published value and a write to the PLC through the
broker, kills the owner and prints the measured takeover beside the budget
admission computed, with the terms that make up that budget. It exits 0 when
the takeover stayed within the budget and the PLC never saw two clients.

With --fleet-store there is no etcd at all: three nodes each run
'leasebridge store' (their member of the fleet's own lease store) and
'leasebridge run' from one file, and the demo kills the owner's whole node,
its bridge and its member together.

The bridges run the leasebridge binary given by --leasebridge, else the one
beside this command, else one it builds into its working directory with
'go build' (from inside the repository).

SIGINT or SIGTERM stops it: it kills its bridge processes, waits for them,
removes its working directory (unless --keep) and exits 130 (SIGINT) or 143
(SIGTERM). The demo prints to standard output; the bridges' logs are in the
working directory.

examples:
  # from the repository root: builds both commands, then runs the demo
  scripts/demo
  # keep the bridges' configurations and logs afterwards
  go run ./cmd/leasebridge-demo --keep
  # the fleet as its own lease store: three nodes, no etcd
  scripts/demo --fleet-store

flags:
`

func main() {
	os.Exit(demo(os.Args[1:], os.Stdout, os.Stderr))
}

// signalExit is the exit status of a command ended by sig: 128 + its number.
func signalExit(sig syscall.Signal) int { return 128 + int(sig) }

// demo parses the command line, runs the demo and turns SIGINT and SIGTERM
// into a clean end: its bridges are killed and waited for, its directory
// removed, and it exits 128 + the signal number (130, 143).
func demo(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("leasebridge-demo", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	keep := fl.Bool("keep", false, "keep the working directory (configs and bridge logs)")
	bridge := fl.String("leasebridge", "", "the leasebridge binary the bridges run (default: the one beside this command, else built)")
	fleet := fl.Bool("fleet-store", false, "no etcd: three nodes, each running `leasebridge store` (its member of the fleet's own lease store) and `leasebridge run`; the owner's whole node is killed")
	err := fl.Parse(args)
	if err == nil && fl.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, about)
		fl.SetOutput(stdout)
		fl.PrintDefaults()
		return exitOK
	case err != nil:
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
			msg = "unknown flag " + name
		}
		fmt.Fprintf(stderr, "leasebridge-demo: %s\nrun 'leasebridge-demo -h' for the flags\n", msg)
		return exitInvalid
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	caught := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			caught <- s
			cancel(fmt.Errorf("%v", s))
		case <-ctx.Done():
		}
	}()
	dir, err := os.MkdirTemp("", "leasebridge-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge-demo: %v\n", err)
		return exitRefused
	}
	// Named first, so that a kept directory can be found however the
	// demo ends.
	if *keep {
		fmt.Fprintf(stdout, "leasebridge-demo: working directory %s, kept at the end (--keep)\n", dir)
	} else {
		fmt.Fprintf(stdout, "leasebridge-demo: working directory %s, removed at the end\n", dir)
	}
	code, err := runDemo(ctx, stdout, dir, *keep, *bridge, *fleet)
	select {
	case s := <-caught:
		what := "bridges killed"
		if errors.Is(err, errBuildInterrupted) {
			what = "interrupted while building leasebridge; nothing was started"
		}
		removed := ", working directory removed"
		if *keep {
			removed = ", working directory kept: " + dir
		}
		fmt.Fprintf(stderr, "leasebridge-demo: %v: %s%s\n", s, what, removed)
		return signalExit(s.(syscall.Signal))
	default:
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge-demo: %v\n", err)
	}
	return code
}
