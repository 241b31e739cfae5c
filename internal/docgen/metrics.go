package main

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/failover"
)

// metricsTable lists every series failover registers, with its type,
// labels and help, read from a live registry.
func metricsTable() (string, error) {
	reg := prometheus.NewPedanticRegistry()
	m := failover.NewMetrics(reg)
	// Touch every vector once so Gather reports it with its labels.
	m.FailureToFull.WithLabelValues("s", failover.CauseOwnerDeath).Observe(0)
	m.State.Set("s", "standby")
	m.Epoch.WithLabelValues("s").Set(0)
	m.RenewFailures.WithLabelValues("s").Add(0)
	m.StepDowns.WithLabelValues("s").Add(0)
	m.Budget.WithLabelValues("s", "owner_death").Set(0)
	m.TransportErrors.WithLabelValues("s", "t", "open").Add(0)
	m.Takeovers.WithLabelValues("s").Add(0)
	m.ClaimConflicts.WithLabelValues("s").Set(0)
	m.TimingMismatch.WithLabelValues("s").Set(0)
	m.TimingMismatches.WithLabelValues("s").Add(0)
	m.SessionUnowned.WithLabelValues("s").Set(0)
	m.WriteRequests.WithLabelValues("s", "r", "ok").Add(0)
	m.DeviceUp.WithLabelValues("s", "d").Set(0)
	m.DeviceLastGood.WithLabelValues("s", "d").Set(0)
	m.DeviceStepDowns.WithLabelValues("s").Add(0)
	m.Bridges.Declare("s", "r")
	m.TopologySuspect.WithLabelValues("s").Set(0)
	m.ValuesPolled.WithLabelValues("s", "r").Add(0)
	m.Node.WithLabelValues("n").Set(1)
	m.ValuesPublished.WithLabelValues("s", "r").Add(0)
	families, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, f := range families {
		var labels []string
		if len(f.Metric) > 0 {
			for _, l := range f.Metric[0].Label {
				labels = append(labels, "`"+l.GetName()+"`")
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.GetName(), strings.ToLower(f.GetType().String()), strings.Join(labels, ", "), f.GetHelp())
	}
	return b.String(), nil
}
