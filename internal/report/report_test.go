package report_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/routes"
)

// TestRefusalShareAgreesWithTable refuses a session whose activation is
// exactly 51.25 % of its budget, a tie the table once rounded to even
// (51.2) and the refusal away from zero (51.3): both must print one figure.
func TestRefusalShareAgreesWithTable(t *testing.T) {
	tm, err := admission.ResolveTiming(admission.Clustered, admission.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	slo := 100 * time.Second
	in := admission.Inputs{Session: "s", Timing: tm, FailoverSLO: &slo, StartupAllowance: time.Second,
		BrokerHealth: admission.BrokerHealth{Mode: admission.BrokerHealthOff},
		Transports:   []admission.Activation{{Name: "t", Bound: 102500 * time.Millisecond}}}
	r := admission.Evaluate(in)
	if r.OwnerDeath.Total != 200*time.Second || r.Admitted() {
		t.Fatalf("want a refused 200s budget, got %v %v", r.OwnerDeath.Total, r.Refusals)
	}
	var b bytes.Buffer
	cfg := &routes.Config{File: "f.yaml", DeploymentMode: admission.Clustered}
	report.WriteText(&b, cfg, []routes.Session{{Name: "s"}}, []admission.Report{r}, nil)
	refusal := regexp.MustCompile(`activation 102\.5s = ([0-9.]+)%`).FindStringSubmatch(b.String())
	row := regexp.MustCompile(`(?m)^\s+activation\s+102\.5s\s+([0-9.]+)%`).FindStringSubmatch(b.String())
	if refusal == nil || row == nil || refusal[1] != row[1] || row[1] != "51.3" {
		t.Errorf("refusal share %v, table share %v, want both 51.3:\n%s", refusal, row, b.String())
	}
}

// TestBudgetPrintsNoPlaceholder: `leasebridge budget` once printed the
// threshold row as "broker_health_step_down B".
func TestBudgetPrintsNoPlaceholder(t *testing.T) {
	for _, m := range report.Profiles {
		p, err := report.EvaluateProfile(m)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		report.WriteProfile(&b, p)
		for _, l := range strings.Split(b.String(), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "B" {
				t.Errorf("%s: placeholder row %q", m, l)
			}
		}
	}
}
