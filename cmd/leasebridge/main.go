// Command leasebridge keeps each exclusive industrial connection (Modbus,
// S7, OPC UA, an MQTT bridge) open on exactly one node of a fleet, with
// failover no slower than the budget admission prints.
//
//	leasebridge run -c FILE                 the bridge
//	leasebridge admit -c FILE [--format text|json|github]
//	                                        dry run for CI: opens nothing
//	leasebridge budget --profile NAME [--json|--markdown]
//	leasebridge status -c FILE [--json]     the fleet view from the lease store
//	leasebridge handover SESSION [--to NODE] -c FILE
//	leasebridge drain NODE -c FILE / undrain NODE -c FILE
//	leasebridge store -c FILE               this node's member of the fleet's own store
//	leasebridge store members|replace|snapshot|restore|roles ... -c FILE
//	leasebridge certs init|member NAME|bridge NAME|reader NAME|admin --dir DIR [-c FILE]
//	                                        the fleet store's CA and certificates
//	leasebridge help [COMMAND]              the commands, or one's flags and examples
//	leasebridge version                     the build stamp (also --version)
//
// Exit status: 0 admitted (admit) or stopped cleanly with every lease
// released (run); 1 refused by admission or a runtime failure (run: a
// lease release that failed at shutdown, an embedded store that cannot
// run); 2 invalid configuration or usage; 75 (run) stepped down after the
// broker path stayed lost, to be restarted as a standby. exitcode.Statuses
// lists run's, rendered in docs/operations.md.
//
// The command line is the standard flag package and the small command
// table below: it gives per-command help, rejects unknown and conflicting
// flags, and needs no dependency.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
)

// Short names for the statuses of the one exit-code table (exitcode).
const (
	exitOK      = exitcode.OK
	exitRefused = exitcode.Refused
	exitInvalid = exitcode.Invalid
)

// demoMoved answers `leasebridge demo`: the demo links a broker, a PLC
// simulator and a fault proxy, which the shipped binary does not carry.
const demoMoved = "leasebridge demo: the demo is its own command, outside the shipped binary: run scripts/demo, or go run ./cmd/leasebridge-demo"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one entry of the command table: `leasebridge help` lists the
// entries, `leasebridge help NAME` and `leasebridge NAME -h` print one.
type command struct {
	name     string
	synopsis string // the arguments after the name
	summary  string // one line for the list
	about    string // what it does, at length
	examples string // one command per line, each with a comment
	main     func(args []string, stdout, stderr io.Writer) int
}

// commands is the command table, in the order `help` lists it. A function,
// not a variable: the commands look their own entry up.
func commands() []command {
	return []command{
		{name: "run", synopsis: "-c FILE [--log-format json|text] [--log-level debug|info|warn|error]",
			summary: "the bridge: admission, then serve every session",
			about:   runAbout, examples: runExamples, main: runMain},
		{name: "admit", synopsis: "-c FILE [--format text|json|github]",
			summary: "admission dry run for CI: opens nothing; exit 0 admitted, 1 refused, 2 invalid",
			about:   admitAbout, examples: admitExamples, main: admit},
		{name: "budget", synopsis: "--profile standalone|clustered|all [--json | --markdown]",
			summary: "a shipped lease profile's failover budgets",
			about:   budgetAbout, examples: budgetExamples, main: budget},
		{name: "status", synopsis: "-c FILE [--json]",
			summary: "the fleet view from the lease store; exit 0 every session owned, 1 not",
			about:   statusAbout, examples: statusExamples, main: status},
		{name: "handover", synopsis: "SESSION [--to NODE] -c FILE",
			summary: "planned handover of one session through the lease store, within its printed budget",
			about:   handoverAbout, examples: handoverExamples, main: handover},
		{name: "drain", synopsis: "NODE -c FILE",
			summary: "the node hands its sessions over one at a time and stops competing",
			about:   drainAbout, examples: drainExamples, main: drain("drain", true)},
		{name: "undrain", synopsis: "NODE -c FILE",
			summary: "the node competes for its sessions again",
			about:   undrainAbout, examples: undrainExamples, main: drain("undrain", false)},
		{name: "store", synopsis: "-c FILE | members|replace NAME|snapshot OUT|restore IN|roles -c FILE [--json]",
			summary: "the fleet's own lease store: run this node's etcd member, or operate the members",
			about:   storeAbout, examples: storeExamples, main: store},
		{name: "certs", synopsis: "init|member NAME|bridge NAME|reader NAME|admin --dir DIR [-c FILE] [--host HOST]...",
			summary: "the fleet store's CA and a certificate per member, bridge and reader",
			about:   certsAbout, examples: certsExamples, main: certs},
		{name: "version", synopsis: "",
			summary: "module version, VCS revision, Go version (also --version)",
			about:   versionAbout, examples: versionExamples, main: version},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeCommands(stderr)
		return exitInvalid
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return help(args[1:], stdout, stderr)
	case "--version":
		return version(args[1:], stdout, stderr)
	case "demo":
		fmt.Fprintln(stderr, demoMoved)
		return exitInvalid
	}
	if c, ok := lookup(args[0]); ok {
		return c.main(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "leasebridge: unknown command %q\n", args[0])
	writeCommands(stderr)
	return exitInvalid
}

// help is `leasebridge help [COMMAND]`.
func help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0 || len(args) == 1 && args[0] == "help":
		writeCommands(stdout)
		return exitOK
	case len(args) == 1:
		if c, ok := lookup(args[0]); ok {
			return c.main([]string{"-h"}, stdout, stderr)
		}
		fmt.Fprintf(stderr, "leasebridge help: unknown command %q\n", args[0])
	default:
		fmt.Fprintf(stderr, "leasebridge help: one command at most, got %q\n", args)
	}
	writeCommands(stderr)
	return exitInvalid
}

func writeCommands(w io.Writer) {
	fmt.Fprint(w, "leasebridge keeps each exclusive industrial connection open on exactly one\n"+
		"node of a fleet, with failover no slower than the budget admission prints.\n\n"+
		"usage: leasebridge COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "this list; `leasebridge help COMMAND` prints a command's flags and examples")
	fmt.Fprintf(w, "\nexit status: %d admitted or stopped cleanly; %d refused or a runtime failure;\n"+
		"%d invalid configuration or usage; %d (run) stepped down, restart as a standby.\n",
		exitOK, exitRefused, exitInvalid, exitcode.StepDown)
}

// flagSet is a command's flags: -h prints the command's help to stdout; an
// unknown flag or stray argument prints one line and a usage hint to
// stderr and makes the command exit 2.
type flagSet struct {
	*flag.FlagSet
	cmd            command
	stdout, stderr io.Writer
}

func newFlags(name string, stdout, stderr io.Writer) *flagSet {
	c, _ := lookup(name)
	fl := flag.NewFlagSet("leasebridge "+name, flag.ContinueOnError)
	fl.SetOutput(io.Discard) // parse errors are printed by parse, once
	fl.Usage = func() {}
	return &flagSet{FlagSet: fl, cmd: c, stdout: stdout, stderr: stderr}
}

// parse parses args and refuses stray positional arguments.
func (f *flagSet) parse(args []string) error {
	err := f.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		f.writeHelp(f.stdout)
		return err
	}
	if err == nil && f.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", f.Arg(0))
	}
	if err != nil {
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
			msg = "unknown flag " + name
		}
		f.usageError("%s", msg)
	}
	return err
}

// usageError prints a command-line problem with a pointer to the help.
func (f *flagSet) usageError(format string, args ...any) int {
	fmt.Fprintf(f.stderr, "leasebridge %s: %s\nusage: leasebridge %s %s\nrun 'leasebridge help %s' for the flags and examples\n",
		f.cmd.name, fmt.Sprintf(format, args...), f.cmd.name, f.cmd.synopsis, f.cmd.name)
	return exitInvalid
}

// conflict reports the flags of names that were given together.
func (f *flagSet) conflict(names ...string) error {
	var given []string
	f.Visit(func(fl *flag.Flag) {
		for _, n := range names {
			if fl.Name == n {
				given = append(given, "--"+n)
			}
		}
	})
	if len(given) > 1 {
		return fmt.Errorf("%s conflict: give one", strings.Join(given, " and "))
	}
	return nil
}

func (f *flagSet) writeHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: leasebridge %s %s\n\n%s\n", f.cmd.name, f.cmd.synopsis, aboutText(f.cmd.about))
	fmt.Fprint(w, "\nflags:\n")
	f.VisitAll(func(fl *flag.Flag) {
		arg, usage := flag.UnquoteUsage(fl)
		dash := "--"
		if len(fl.Name) == 1 {
			dash = "-"
		}
		if fl.DefValue != "" && fl.DefValue != "false" {
			usage += fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(dash+fl.Name+" "+arg), usage)
	})
	fmt.Fprintf(w, "\nexamples:\n%s", f.cmd.examples)
}

func flagStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitInvalid
}
