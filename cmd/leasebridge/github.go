package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/routes"
)

// writeGitHub prints `admit --format github`: GitHub Actions workflow
// commands that annotate the configuration file, ::error for every
// refusal and ::notice for every admitted session's budget and every
// password the deployment provides, then the plain summary line.
func writeGitHub(w io.Writer, cfg *routes.Config, doc report.Admission, notes routes.Errors) {
	fs := admission.FormatSeconds
	admitted := 0
	for _, s := range doc.Sessions {
		at := sessionPosition(cfg, s)
		if !s.Admitted {
			for _, why := range s.Refusals {
				annotate(w, "error", at, "leasebridge admit: session "+s.Session+" refused", why)
			}
			continue
		}
		admitted++
		msg := "owner-death budget " + fs(nsDuration(s.OwnerDeathNS))
		if s.FailoverSLONS != nil {
			msg += " (failover_slo " + fs(nsDuration(s.FailoverSLONS)) + ")"
		}
		if s.BrokerPathNS != nil {
			msg += "; broker-path budget " + fs(nsDuration(s.BrokerPathNS))
		} else {
			msg += "; broker_path_failover " + s.BrokerPathFailover
		}
		annotate(w, "notice", at, "leasebridge admit: session "+s.Session+" admitted", msg)
		for _, warn := range s.Warnings {
			annotate(w, "warning", at, "leasebridge admit: session "+s.Session+" warning", warn)
		}
	}
	for _, wn := range doc.Warnings {
		annotate(w, "warning", wn, "leasebridge admit: warning", wn.Path+": "+wn.Message)
	}
	for _, n := range notes {
		annotate(w, "notice", n, "leasebridge admit: provided by the deployment",
			n.Path+": "+n.Message+"; run requires it, admit does not check it")
	}
	fmt.Fprintf(w, "%s: %d of %d session(s) admitted\n", cfg.File, admitted, len(doc.Sessions))
}

func nsDuration(ns *int64) time.Duration {
	if ns == nil {
		return 0
	}
	return time.Duration(*ns)
}

// sessionPosition is where a session is written: its first route.
func sessionPosition(cfg *routes.Config, s report.Session) *routes.FieldError {
	for i, r := range cfg.Routes {
		if slices.Contains(s.Routes, r.Name) {
			return cfg.ErrorAt(fmt.Sprintf("routes[%d]", i), "")
		}
	}
	return &routes.FieldError{File: cfg.File}
}

// annotate prints one workflow command (::error or ::notice) at the
// position of at, escaped as the runner expects.
func annotate(w io.Writer, level string, at *routes.FieldError, title, message string) {
	props := []string{"file=" + escapeProperty(at.File)}
	if at.Line > 0 {
		props = append(props, fmt.Sprintf("line=%d", at.Line))
		if at.Column > 0 {
			props = append(props, fmt.Sprintf("col=%d", at.Column))
		}
	}
	props = append(props, "title="+escapeProperty(title))
	fmt.Fprintf(w, "::%s %s::%s\n", level, strings.Join(props, ","), escapeData(message))
}

var (
	dataEscaper     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	propertyEscaper = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)

// escapeData escapes a workflow command's message.
func escapeData(s string) string { return dataEscaper.Replace(s) }

// escapeProperty escapes a workflow command's property value.
func escapeProperty(s string) string { return propertyEscaper.Replace(s) }
