// Command docgen writes the documentation pages whose numbers come from the
// code. Run it with `go generate ./internal/docgen`; TestDocsUpToDate fails
// when a page differs from what it would write.
package main

//go:generate go run . -out ../../docs

import (
	"bytes"
	_ "embed"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/cmd/leasebridge/exitcode"
	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/lease/etcdembed"
	"github.com/leasebridge/leasebridge/preflight"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/routes/suggest"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/tagvalue"

	// The device kinds document their own keys.
	_ "github.com/leasebridge/leasebridge/transports/all"
)

//go:embed bridged-data.md.tmpl
var bridgedDataTmpl string

//go:embed failover-budget.md.tmpl
var failoverBudgetTmpl string

//go:embed admit-json.md.tmpl
var admitJSONTmpl string

//go:embed configuration.md.tmpl
var configurationTmpl string

//go:embed operations.md.tmpl
var operationsTmpl string

//go:embed status-json.md.tmpl
var statusJSONTmpl string

//go:embed writes.md.tmpl
var writesTmpl string

// exampleConfig is admitted to produce the real output shown in
// admit-json.md; the path is relative to this package, where go generate
// and go test run.
const exampleConfig = "../../examples/clustered-sidecar.yaml"

// exampleVersion stands in admit-json.md's example for the version a
// release binary prints.
const exampleVersion = "v0.1.0"

func main() {
	out := flag.String("out", "docs", "directory the pages are written to")
	flag.Parse()
	pages, err := render()
	if err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	for name, data := range pages {
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "docgen:", err)
			os.Exit(1)
		}
	}
}

// defaultDeviceActivation is the activation bound a device connection
// (transports.Conn) reports at the default timeouts.
func defaultDeviceActivation() time.Duration {
	c := transports.NewConn(transports.ConnConfig[int]{
		ConnectTimeout: routes.DefaultDeviceConnectTimeout, RequestTimeout: routes.DefaultDeviceRequestTimeout})
	return c.ActivationBound()
}

// churnD is the device_path_step_down of the churn example.
const churnD = time.Minute

// render returns every generated page by file name.
func render() (map[string][]byte, error) {
	sa, err := report.EvaluateProfile(admission.Standalone)
	if err != nil {
		return nil, err
	}
	cl, err := report.EvaluateProfile(admission.Clustered)
	if err != nil {
		return nil, err
	}
	pages := map[string]func() ([]byte, error){
		"failover-budget.md": func() ([]byte, error) { return budgetPage(sa, cl) },
		"admit-json.md":      admitPage,
		"configuration.md":   configurationPage,
		"operations.md":      operationsPage,
		"bridged-data.md":    func() ([]byte, error) { return bridgedData(sa, cl) },
		"writes.md":          func() ([]byte, error) { return execute(writesTmpl, writesData()) },
		"status-json.md":     statusPage,
	}
	out := make(map[string][]byte, len(pages))
	for name, page := range pages {
		b, err := page()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}

// budgetPage is failover-budget.md: the shipped profiles sa and cl, and
// every constant its text quotes.
func budgetPage(sa, cl report.Profile) ([]byte, error) {
	fs := admission.FormatSeconds
	table, err := report.ProfileTable()
	if err != nil {
		return nil, err
	}
	ratio := func(p report.Profile) string {
		return fmt.Sprintf("%.1f", float64(p.OwnerDeath.Total)/float64(p.Timing.LeaseTTL))
	}
	deferral, err := admission.TakeoverDeferral(cl.Timing)
	if err != nil {
		return nil, err
	}
	data := map[string]any{
		"MinPoll":                  fs(time.Millisecond),
		"StepStage":                fs(admission.MaxStepDownStage),
		"StepDownExit":             exitcode.StepDown,
		"ClockPPM":                 admission.ClockRatePPM,
		"MQTTConnect":              fs(routes.DefaultMQTTConnectTimeout),
		"MQTTReconcile":            fs(routes.DefaultMQTTReconcileTimeout),
		"MQTTGrace":                fs(routes.DefaultMQTTUnmatchedGrace),
		"MQTTActivation":           fs(sa.Activation),
		"DeviceActivation":         fs(defaultDeviceActivation()),
		"StandaloneL":              fs(admission.StandaloneLeaseTTL),
		"StandaloneC":              fs(admission.StandaloneCallTimeout),
		"StandaloneP":              fs(admission.StandalonePollInterval),
		"StandaloneG":              fs(admission.StandaloneStepDownGrace),
		"ClusteredL":               fs(admission.ClusteredLeaseTTL),
		"ClusteredR":               fs(admission.ClusteredRenewInterval),
		"ClusteredJ":               fs(admission.ClusteredRenewJitter),
		"ClusteredC":               fs(admission.ClusteredCallTimeout),
		"ClusteredP":               fs(admission.ClusteredPollInterval),
		"ClusteredG":               fs(admission.ClusteredStepDownGrace),
		"Rounds":                   admission.RenewRoundsPerTTL,
		"MaxRenewFails":            admission.DefaultMaxRenewFails,
		"Table":                    table,
		"StandaloneRatio":          ratio(sa),
		"ClusteredRatio":           ratio(cl),
		"ClusteredActivationShare": fmt.Sprintf("%.0f%%", float64(cl.Activation)*100/float64(cl.OwnerDeath.Total)),
		"ChurnD":                   fs(churnD),
		"ChurnPerHour":             int64(time.Hour / churnD),
		"ClusteredDeferral":        fs(deferral),
	}
	store, err := storeData(cl)
	if err != nil {
		return nil, err
	}
	for k, v := range store {
		data[k] = v
	}
	return execute(failoverBudgetTmpl, data)
}

// admitPage is admit-json.md: the document's fields and an example.
func admitPage() ([]byte, error) {
	example, err := admitExample()
	if err != nil {
		return nil, err
	}
	return execute(admitJSONTmpl, map[string]any{
		"ExitAdmitted": exitcode.Admitted, "ExitRefused": exitcode.Refused, "ExitInvalid": exitcode.Invalid,
		"Example": example, "SchemaVersion": report.SchemaVersion, "MaxSuggestKiB": suggest.MaxBytes >> 10, "MaxSuggestSessions": suggest.MaxSessions,
		"MaxProblems": routes.MaxProblems, "MaxMessage": routes.MaxMessage,
	})
}

// configurationPage is configuration.md: the key reference and the limits
// of what an error repeats.
func configurationPage() ([]byte, error) {
	ref, err := configReference()
	if err != nil {
		return nil, err
	}
	return execute(configurationTmpl, map[string]any{"Reference": ref, "MaxEcho": routes.MaxEcho, "ClipAbove": routes.ClipAbove,
		"MaxProblems": routes.MaxProblems, "MaxMessage": routes.MaxMessage})
}

// operationsPage is operations.md: the start-up log, exit statuses,
// metrics and the embedded store's disk use.
func operationsPage() ([]byte, error) {
	metrics, err := metricsTable()
	if err != nil {
		return nil, err
	}
	startup, err := startupLog()
	if err != nil {
		return nil, err
	}
	opsData := map[string]any{
		"StartupLog": startup,
		"ExitOK":     exitcode.OK, "ExitRefused": exitcode.Failure, "ExitInvalid": exitcode.Invalid,
		"ExitFailure": exitcode.Failure, "Exits": exitTable(exitcode.Statuses), "StoreExits": exitTable(exitcode.StoreStatuses),
		"Metrics": metrics, "GCPercent": failover.GCPercent, "Probes": failover.ProbesPerRenewInterval,
	}
	for k, v := range embeddedDisk() {
		opsData[k] = v
	}
	return execute(operationsTmpl, opsData)
}

// statusPage is status-json.md: an example and the exit statuses.
func statusPage() ([]byte, error) {
	statusEx, err := statusExample()
	if err != nil {
		return nil, err
	}
	return execute(statusJSONTmpl, map[string]any{"Example": statusEx, "ExitOK": exitcode.Admitted,
		"ExitNotOwned": exitcode.NotOwned, "ExitInvalid": exitcode.Invalid, "ExitStoreDown": exitcode.StoreDown})
}

func execute(tmpl string, data any) ([]byte, error) {
	t, err := template.New("page").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// startupLog is what `leasebridge run` logs per session at start-up for
// the example, without timestamps.
func startupLog() (string, error) {
	cfg, err := routes.Load(exampleConfig)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}))
	reports, errs := preflight.Admit(cfg, false)
	if len(errs) > 0 {
		return "", errs
	}
	failover.LogBudgets(log, reports)
	return b.String(), nil
}

// admitExample is what `leasebridge admit --json` prints for the example,
// with the path as a user would type it from the repository root.
func admitExample() (string, error) {
	cfg, err := routes.Load(exampleConfig)
	if err != nil {
		return "", err
	}
	cfg.File = strings.TrimPrefix(exampleConfig, "../../")
	built, errs := preflight.Build(cfg, false)
	if len(errs) > 0 {
		return "", errs
	}
	sessions := built.Sessions()
	doc := report.FromReports(cfg, sessions, routes.AdmitSessions(sessions))
	doc.DeploymentInputs = cfg.MissingPasswords()
	// The binary's own version varies by build; the page shows a release's.
	doc.LeasebridgeVersion = exampleVersion
	var b bytes.Buffer
	if err := report.WriteJSON(&b, doc); err != nil {
		return "", err
	}
	return b.String(), nil
}

// exitTable renders a command's exit statuses (exitcode.Statuses,
// exitcode.StoreStatuses).
func exitTable(statuses []exitcode.Status) string {
	var b strings.Builder
	b.WriteString("| exit status | when | what to do |\n|---|---|---|\n")
	for _, e := range statuses {
		fmt.Fprintf(&b, "| %d | %s | %s |\n", e.Code, e.When, e.Do)
	}
	return b.String()
}

// embeddedDisk are the embedded store's disk numbers, in MB (10^6 bytes,
// etcd's own unit for WAL segments).
func embeddedDisk() map[string]any {
	mb := func(n int64) string { return fmt.Sprintf("%d", (n+999_999)/1_000_000) }
	seg := etcdembed.WALSegmentBytes()
	return map[string]any{
		"WALSegmentMB": mb(seg), "MaxWALFiles": etcdembed.MaxWALFiles, "MaxSnapFiles": etcdembed.MaxSnapFiles,
		"WALMB": mb(int64(etcdembed.MaxWALFiles+1) * seg), "QuotaMB": mb(etcdembed.QuotaBytes),
		"Compaction": etcdembed.CompactionRetention, "DiskNeedMB": mb(etcdembed.DiskNeed()),
		"FirstStartMB": mb(2 * seg), "EmbedClose": admission.FormatSeconds(etcdembed.CloseTimeout),
	}
}

// writesData is what docs/writes.md takes from the code: reply codes,
// bounds and the write route's defaults.
func writesData() map[string]any {
	return map[string]any{
		"Codes": dataplane.WriteCodes, "MaxRequest": dataplane.MaxWriteRequestBytes, "MaxID": dataplane.MaxWriteIDBytes,
		"MaxTag": dataplane.MaxWriteTagBytes, "MaxMessage": dataplane.MaxWriteMessageBytes, "MaxReply": dataplane.MaxWriteReplyBytes,
		"QueueDepth": dataplane.WriteQueueDepth, "IDs": dataplane.MaxWriteIDsRemembered, "QoS0Backlog": dataplane.MaxWriteQoS0Backlog,
		"MaxNumber": tagvalue.MaxNumberLen, "MaxExponent": tagvalue.MaxExponent,
		"MaxAge": admission.FormatSeconds(routes.DefaultWriteMaxAge), "ClockSkew": admission.FormatSeconds(routes.DefaultWriteClockSkew),
		"QoS": routes.DefaultWriteQoS,
	}
}
