package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// The README's first command: the demo builds, runs two bridge processes,
// kills the owner and reports a takeover inside the admitted budget with
// one PLC connection at a time. The demo itself compares its measurements
// with the budget; this test checks that it did and printed them.
func TestDemoTakesOverWithinBudget(t *testing.T) {
	bin := testbin.Leasebridge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"took over plc-1 at epoch", "peak concurrent PLC connections:                       1",
		"RESULT: takeover within the admitted budget, and the PLC never saw two clients"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	seconds := func(re string) float64 {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("demo output does not match %s:\n%s", re, text)
		}
		f, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	budget := seconds(`admitted owner-death budget: +([0-9.]+)s`)
	for _, re := range []string{`FailureToFullDuration \(bridge-., from its first observation of the stale row\): ([0-9.]+)s`,
		`kill -> first value published by the successor: +([0-9.]+)s`} {
		if got := seconds(re); got <= 0 || got > budget {
			t.Errorf("%s = %gs, admitted budget %gs", re, got, budget)
		}
	}
}

// Numbers the README states about exit statuses come from the code.
func TestReadmeExitStatuses(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, want := range []string{
		"Exit " + itoa(report.ExitAdmitted) + " admitted, " + itoa(report.ExitRefused) + " refused, " + itoa(report.ExitInvalid) + " invalid",
		"exits " + itoa(report.ExitRefused) + " before any store",
		"exits " + itoa(failover.ExitStepDown),
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
