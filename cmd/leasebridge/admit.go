package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/routes"
)

// admit runs admission on a configuration file and opens nothing else.
func admit(args []string, stdout, stderr io.Writer) int {
	// The report is thousands of small writes for a large file: one
	// system call each would cost more than admission itself.
	out, errOut := bufio.NewWriter(stdout), bufio.NewWriter(stderr)
	defer out.Flush()
	defer errOut.Flush()
	stdout, stderr = out, errOut
	fl := newFlags("admit", stderr)
	file := fl.String("c", "", "configuration file")
	asJSON := fl.Bool("json", false, "print the result as JSON (docs/admit-json.md)")
	if err := parseFlags(fl, args); err != nil {
		return flagStatus(err)
	}
	if *file == "" {
		fmt.Fprintf(stderr, "leasebridge admit: -c FILE is required\n")
		return exitInvalid
	}
	cfg, errs := load(*file, false)
	if len(errs) > 0 {
		if *asJSON {
			if err := report.WriteJSON(stdout, report.Invalid(*file, errs)); err != nil {
				fmt.Fprintf(stderr, "leasebridge admit: %v\n", err)
			}
		} else {
			fmt.Fprintf(stderr, "%s: invalid configuration (%d problem(s)):\n", *file, len(errs))
			for _, e := range errs {
				fmt.Fprintf(stderr, "  %v\n", e)
			}
		}
		return exitInvalid
	}
	sessions := cfg.Sessions()
	reports := routes.AdmitSessions(sessions)
	doc := report.FromReports(cfg, sessions, reports)
	if *asJSON {
		if err := report.WriteJSON(stdout, doc); err != nil {
			fmt.Fprintf(stderr, "leasebridge admit: %v\n", err)
			return exitInvalid
		}
	} else {
		report.WriteText(stdout, cfg, sessions, reports)
	}
	if !doc.Admitted {
		return exitRefused
	}
	return exitOK
}

// load decodes and validates the file, then builds every transport it
// names without opening any (failover.Preflight), so that admit and run
// refuse the same configurations; needFiles: the certificate, key and
// password files it names must be readable (run), or may be absent
// (admit, a dry run away from the deployment).
func load(file string, needFiles bool) (*routes.Config, routes.Errors) {
	cfg, err := routes.Load(file)
	if err != nil {
		var errs routes.Errors
		if !errors.As(err, &errs) {
			// Unreadable file: wrap it so it prints like any other error.
			errs = routes.Errors{{File: file, Message: err.Error()}}
		}
		return nil, errs
	}
	if errs := failover.Preflight(cfg, needFiles); len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}
