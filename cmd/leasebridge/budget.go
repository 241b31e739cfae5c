package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/report"
)

// budget prints a shipped profile's budgets at the MQTT defaults.
func budget(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("budget", stderr)
	profile := fl.String("profile", "", "standalone, clustered or all")
	asJSON := fl.Bool("json", false, "print JSON")
	markdown := fl.Bool("markdown", false, "print the Markdown table of docs/failover-budget.md")
	if err := parseFlags(fl, args); err != nil {
		return flagStatus(err)
	}
	if *markdown {
		t, err := report.ProfileTable()
		if err != nil {
			fmt.Fprintf(stderr, "leasebridge budget: %v\n", err)
			return exitInvalid
		}
		fmt.Fprint(stdout, t)
		return exitOK
	}
	var modes []admission.Mode
	switch *profile {
	case "all":
		modes = report.Profiles
	case string(admission.Standalone), string(admission.Clustered):
		modes = []admission.Mode{admission.Mode(*profile)}
	case "":
		fmt.Fprintf(stderr, "leasebridge budget: --profile is required: standalone, clustered or all\n")
		return exitInvalid
	default:
		fmt.Fprintf(stderr, "leasebridge budget: unknown profile %q: want standalone, clustered or all\n", *profile)
		return exitInvalid
	}
	var out []report.Profile
	for i, m := range modes {
		p, err := report.EvaluateProfile(m)
		if err != nil {
			fmt.Fprintf(stderr, "leasebridge budget: profile %s: %v\n", m, err)
			return exitInvalid
		}
		out = append(out, p)
		if !*asJSON {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			report.WriteProfile(stdout, p)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "leasebridge budget: %v\n", err)
			return exitInvalid
		}
	}
	return exitOK
}
