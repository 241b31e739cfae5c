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
	fl := newFlags("budget", stdout, stderr)
	profile := fl.String("profile", "", "the lease profile: `standalone|clustered|all`")
	asJSON := fl.Bool("json", false, "print JSON")
	markdown := fl.Bool("markdown", false, "print the Markdown table of docs/failover-budget.md")
	if err := fl.parse(args); err != nil {
		return flagStatus(err)
	}
	if err := fl.conflict("json", "markdown"); err != nil {
		return fl.usageError("%v", err)
	}
	var modes []admission.Mode
	switch *profile {
	case "all":
		modes = report.Profiles
	case string(admission.Standalone), string(admission.Clustered):
		modes = []admission.Mode{admission.Mode(*profile)}
	case "":
		if !*markdown {
			return fl.usageError("--profile is required: standalone, clustered or all")
		}
		modes = report.Profiles
	default:
		return fl.usageError("unknown profile %q: want standalone, clustered or all", *profile)
	}
	if *markdown {
		t, err := report.ProfileTable(modes...)
		if err != nil {
			fmt.Fprintf(stderr, "leasebridge budget: %v\n", err)
			return exitInvalid
		}
		fmt.Fprint(stdout, t)
		return exitOK
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
