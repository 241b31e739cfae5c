package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/routes/suggest"
)

// admit runs admission on a configuration file and opens nothing else.
func admit(args []string, stdout, stderr io.Writer) int {
	// The report is thousands of small writes for a large file: one
	// system call each would cost more than admission itself.
	out, errOut := bufio.NewWriter(stdout), bufio.NewWriter(stderr)
	defer out.Flush()
	defer errOut.Flush()
	stdout, stderr = out, errOut
	fl := newFlags("admit", stdout, stderr)
	file := fl.String("c", "", "the configuration `FILE` (required)")
	format := fl.String("format", "text", "print the result as `text|json|github`")
	asJSON := fl.Bool("json", false, "the same as --format json")
	if err := fl.parse(args); err != nil {
		return flagStatus(err)
	}
	if *asJSON {
		if *format != "text" && *format != "json" {
			return fl.usageError("--json and --format %s conflict: --json is --format json", *format)
		}
		*format = "json"
	}
	if *format != "text" && *format != "json" && *format != "github" {
		return fl.usageError("--format %q: want text, json or github", *format)
	}
	if *file == "" {
		return fl.usageError("-c FILE is required")
	}
	cfg, built, errs := load(*file, false)
	if len(errs) > 0 {
		return invalid(*format, *file, errs, stdout, stderr)
	}
	sessions := built.Sessions()
	reports := routes.AdmitSessions(sessions)
	doc := report.FromReports(cfg, sessions, reports)
	notes := cfg.MissingPasswords()
	doc.DeploymentInputs = notes
	doc.Warnings = append(doc.Warnings, cfg.Warnings()...)
	sugg := suggestions(cfg, sessions, reports)
	for i := range doc.Sessions {
		doc.Sessions[i].Suggestions = sugg[doc.Sessions[i].Session]
	}
	switch *format {
	case "json":
		if err := report.WriteJSON(stdout, doc); err != nil {
			fmt.Fprintf(stderr, "leasebridge admit: %v\n", err)
			return exitInvalid
		}
	case "github":
		writeGitHub(stdout, cfg, doc, notes)
	default:
		report.WriteText(stdout, cfg, sessions, reports, sugg)
		for _, w := range doc.Warnings {
			fmt.Fprintf(stdout, "warning: %v\n", w)
		}
		if cfg.IsWitness() {
			fmt.Fprintf(stdout, "a witness's file (lease_store.members, no routes): `leasebridge store -c FILE` runs the member %s; `leasebridge run` refuses it\n", cfg.Node)
		}
		if len(notes) > 0 {
			fmt.Fprintf(stdout, "\nnot checked here: the deployment provides them, and run requires them:\n")
			for _, n := range notes {
				fmt.Fprintf(stdout, "  %v\n", n)
			}
		}
	}
	if !doc.Admitted {
		return exitRefused
	}
	return exitOK
}

// suggestions finds, for each session refused only for its objective,
// the changes that admit it (suggest.For), each evaluated by
// admitting the changed text as this command does.
func suggestions(cfg *routes.Config, sessions []routes.Session, reports []admission.Report) map[string][]suggest.Suggestion {
	out := map[string][]suggest.Suggestion{}
	var data []byte
	tried := 0
	for i, r := range reports {
		if r.Admitted() || r.FailoverSLO == nil || tried == suggest.MaxSessions {
			continue
		}
		tried++
		if data == nil {
			var err error
			if data, err = os.ReadFile(cfg.File); err != nil {
				return out
			}
		}
		if s := suggest.For(cfg, data, sessions[i], r, evaluator(cfg.File)); len(s) > 0 {
			out[r.Session] = s
		}
	}
	return out
}

// evaluator admits a configuration's text under file's name.
func evaluator(file string) suggest.Evaluator {
	return func(data []byte) (map[string]admission.Report, error) {
		cfg, err := routes.Parse(file, data)
		if err != nil {
			return nil, err
		}
		built, errs := preflight.Build(cfg, false)
		if len(errs) > 0 {
			return nil, errs
		}
		sessions := built.Sessions()
		out := make(map[string]admission.Report, len(sessions))
		for i, r := range routes.AdmitSessions(sessions) {
			out[sessions[i].Name] = r
		}
		return out, nil
	}
}

// invalid prints an invalid or unreadable configuration in format.
func invalid(format, file string, errs routes.Errors, stdout, stderr io.Writer) int {
	switch format {
	case "json":
		if err := report.WriteJSON(stdout, report.Invalid(file, errs)); err != nil {
			fmt.Fprintf(stderr, "leasebridge admit: %v\n", err)
		}
	case "github":
		shown, more := errs.Shown()
		for _, e := range shown {
			msg := e.Message
			if e.Path != "" {
				msg = e.Path + ": " + msg
			}
			annotate(stdout, "error", e, "leasebridge admit: invalid configuration", msg)
		}
		if more > 0 {
			annotate(stdout, "error", &routes.FieldError{File: file}, "leasebridge admit: invalid configuration", routes.MoreProblems(more))
		}
	default:
		writeInvalid(stderr, "admit", file, errs)
	}
	return exitInvalid
}

// writeInvalid prints configuration problems for people: a file that
// cannot be read on one line, else one line per problem, the first
// routes.MaxProblems of them (routes.Errors.Shown).
func writeInvalid(w io.Writer, cmd, file string, errs routes.Errors) {
	shown, more := errs.Shown()
	if len(errs) == 1 && errs[0].Line == 0 && errs[0].Path == "" {
		fmt.Fprintf(w, "leasebridge %s: %v\n", cmd, shown[0])
		return
	}
	fmt.Fprintf(w, "%s: invalid configuration (%d problem(s)):\n", file, len(errs))
	for _, e := range shown {
		fmt.Fprintf(w, "  %v\n", e)
	}
	if more > 0 {
		fmt.Fprintf(w, "  %s\n", routes.MoreProblems(more))
	}
}

// load decodes and validates the file, then builds every transport it
// names without opening any (preflight.Build), so that admit and run
// refuse the same configurations and admission sums the bounds those
// transports report; needFiles: the certificate, key and
// password files it names must be readable and its password_env variables
// set (run), or may be absent (admit, a dry run away from the deployment).
// Messages are redacted: a transport's error may quote a URL.
func load(file string, needFiles bool) (*routes.Config, *preflight.Built, routes.Errors) {
	cfg, err := routes.Load(file)
	if err != nil {
		var errs routes.Errors
		if !errors.As(err, &errs) {
			errs = routes.Errors{{File: file, Message: readProblem(err)}}
		}
		return nil, nil, redactErrors(errs)
	}
	built, errs := preflight.Build(cfg, needFiles)
	if needFiles {
		// Preflight reads the brokers' passwords as it builds them; the
		// lease store's and the devices' are read at connect time.
		for _, e := range cfg.MissingPasswords() {
			if !strings.HasPrefix(e.Path, "brokers.") {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, redactErrors(errs)
	}
	return cfg, built, nil
}

// readProblem says why the file could not be read without repeating its
// path, which the error's File already holds.
func readProblem(err error) string {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return "cannot read: " + pe.Err.Error()
	}
	return err.Error()
}

// redactErrors redacts the messages a report lists, the first
// routes.MaxProblems: the rest are counted, never printed. It redacts before
// routes.Errors.Shown clips, so no cut leaves half a password.
func redactErrors(errs routes.Errors) routes.Errors {
	for _, e := range errs[:min(len(errs), routes.MaxProblems)] {
		e.Message = redact.Text(e.Message)
	}
	return errs
}
