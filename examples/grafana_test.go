package examples

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/fleettest"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name, Type string
			Query      any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("grafana/leasebridge.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/leasebridge.json: %v", err)
	}
	return d
}

// queries are the dashboard's panels that query, rows' panels included.
func (d dashboard) queries() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var metricRE = regexp.MustCompile(`leasebridge_[a-z_]+`)

// registered is every series name the bridge exports (histogram series
// with their suffixes).
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := failover.NewMetrics(reg)
	m.FailureToFull.WithLabelValues("s", failover.CauseOwnerDeath).Observe(0)
	out := map[string]bool{}
	for _, name := range []string{"leasebridge_failure_to_full_seconds_sum", "leasebridge_failure_to_full_seconds_count", "leasebridge_failure_to_full_seconds_bucket"} {
		out[name] = true
	}
	ch := make(chan *prometheus.Desc, 64)
	go func() { reg.Describe(ch); close(ch) }()
	for d := range ch {
		if n := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String()); n != nil {
			out[n[1]] = true
		}
	}
	return out
}

// The dashboard imports into a current Grafana as is: a Prometheus
// datasource variable every panel uses, unique panel ids, and only series
// the bridge exports; it covers what an operator asks of a fleet.
func TestGrafanaDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, schemaVersion %d: want a uid and schemaVersion >= 36", d.UID, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Type+":"+v.Name)
		if v.Type == "datasource" && v.Query != "prometheus" {
			t.Errorf("datasource variable %s queries %v, want prometheus", v.Name, v.Query)
		}
	}
	if !slices.Contains(vars, "datasource:datasource") || !slices.Contains(vars, "query:session") {
		t.Errorf("variables %v: want a datasource variable and a session query variable", vars)
	}
	known, ids, used := registered(t), map[int]bool{}, map[string]bool{}
	for _, p := range d.queries() {
		if ids[p.ID] {
			t.Errorf("panel id %d repeats", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d targets", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			for _, name := range metricRE.FindAllString(tg.Expr, -1) {
				used[name] = true
				if !known[name] {
					t.Errorf("panel %q queries %s, which the bridge does not export", p.Title, name)
				}
			}
		}
	}
	for _, want := range []string{"leasebridge_session_state", "leasebridge_lease_epoch", "leasebridge_failure_to_full_seconds_sum",
		"leasebridge_failover_budget_seconds", "leasebridge_device_up", "leasebridge_lease_store_up", "leasebridge_renew_failures_total",
		"leasebridge_write_requests_total", "leasebridge_bridge_forwarded_total", "leasebridge_bridge_dropped_total",
		"leasebridge_values_polled_total", "leasebridge_values_published_total"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

// startPrometheus runs Debian's prometheus on a loopback port, scraping
// targets every second, until t ends; it returns its base URL.
func startPrometheus(t *testing.T, targets ...string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed (Debian package prometheus; scripts/test installs it): %v", err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	conf := fmt.Sprintf("global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: leasebridge\n    static_configs: [{targets: [%s]}]\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testbin.FreeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	base := "http://" + addr
	testbin.Observe(t, 60*time.Second, func() (bool, string) {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return base
}

// promResult is one instant query's answer.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func query(t *testing.T, base, expr string) promResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	defer resp.Body.Close()
	var r promResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	return r
}

// concrete replaces the dashboard's variables as Grafana would: every
// session of the test fleet, and intervals that hold several scrapes.
var concrete = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "5s", "$__range", "5m",
	"$session", strings.Join(fleettest.Sessions, "|"))

// Every query of every panel returns data from a real Prometheus scraping
// a live fleet after a takeover: the metrics the dashboard names exist
// with the labels it groups by, including the takeover's FailureToFull,
// a write's outcome and the bridge's and poller's counters.
func TestGrafanaDashboardPanelsReturnData(t *testing.T) {
	d := readDashboard(t)
	f := fleettest.Start(t)
	limit := 2*f.Budget(t) + 30*time.Second // hang guards, not timing assertions
	a := f.Run(t, "node-a")
	a.Wait(t, limit, "owning", fleettest.Owning)
	b := f.Run(t, "node-b")
	b.Wait(t, limit, "standing by", fleettest.Standing)
	base := startPrometheus(t, a.HTTP, b.HTTP)
	a.Kill(t)
	b.Wait(t, limit, "owning", fleettest.Owning)
	f.Write(t, limit)
	f.Bridge(t, limit)
	// Several scrapes of the successor after the write, so every rate
	// has two samples of every series.
	testbin.Observe(t, limit, func() (bool, string) {
		r := query(t, base, fmt.Sprintf(`count_over_time(leasebridge_write_requests_total{instance=%q}[1m]) >= 3`, b.HTTP))
		return len(r.Data.Result) > 0, fmt.Sprintf("%+v", r)
	})
	checkSessionVariable(t, base, d)
	for _, p := range d.queries() {
		for _, tg := range p.Targets {
			expr := concrete.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q %s: a variable left in %s", p.Title, tg.RefID, expr)
				continue
			}
			r := query(t, base, expr)
			if r.Status != "success" || len(r.Data.Result) == 0 {
				t.Errorf("panel %q %s returned no data: %s\n%s", p.Title, tg.RefID, expr, r.Error)
			}
		}
	}
	checkOwners(t, base, d, "node-b")
	// What the takeover must have left in the data, beyond "some data".
	for expr, want := range map[string]string{
		`leasebridge_failure_to_full_seconds_count{cause="owner_death",session="plc"}`: "1",
		`rate(leasebridge_values_polled_total{session="plc"}[1m]) > 0`:                 "",
		`leasebridge_write_requests_total{session="plc"}`:                              "1",
		`leasebridge_bridge_forwarded_total{direction="in",session="uplink"}`:          "1",
	} {
		r := query(t, base, fmt.Sprintf(`%s and on(instance) up{instance=%q}`, expr, b.HTTP))
		if len(r.Data.Result) == 0 || (want != "" && fmt.Sprint(r.Data.Result[0].Value[1]) != want) {
			t.Errorf("%s on node-b: %+v, want %q", expr, r.Data.Result, want)
		}
	}
}

// checkSessionVariable runs the session variable's label_values query as
// Grafana does (the label values API) and wants every session of the
// fleet among the answers.
func checkSessionVariable(t *testing.T, base string, d dashboard) {
	t.Helper()
	var q string
	for _, v := range d.Templating.List {
		if v.Name == "session" {
			q, _ = v.Query.(string)
		}
	}
	m := regexp.MustCompile(`^label_values\((\w+), *(\w+)\)$`).FindStringSubmatch(q)
	if m == nil {
		t.Fatalf("session variable query %q: want label_values(metric, label)", q)
	}
	resp, err := http.Get(base + "/api/v1/label/" + m[2] + "/values?match[]=" + url.QueryEscape(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	for _, s := range fleettest.Sessions {
		if !slices.Contains(r.Data, s) {
			t.Errorf("session variable (%s) offers %v, not %s", q, r.Data, s)
		}
	}
}

// checkOwners wants the "Who owns what" panel to name owner, by node
// name, as the serving owner of every session, and no other node.
func checkOwners(t *testing.T, base string, d dashboard, owner string) {
	t.Helper()
	for _, p := range d.queries() {
		if p.Title != "Who owns what" {
			continue
		}
		r := query(t, base, concrete.Replace(p.Targets[0].Expr))
		serving := map[string]string{}
		for _, s := range r.Data.Result {
			if fmt.Sprint(s.Value[1]) == "1" {
				serving[s.Metric["session"]] += s.Metric["node"]
			}
		}
		for _, s := range fleettest.Sessions {
			if serving[s] != owner {
				t.Errorf("Who owns what: %s served by %q, want %s (%+v)", s, serving[s], owner, r.Data.Result)
			}
		}
		return
	}
	t.Error("no panel \"Who owns what\"")
}
