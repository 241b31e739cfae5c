package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/internal/testetcd"
	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/routes"
)

// manySessions is how many sessions one process holds.
const manySessions = 1000

// idleWindow is how long the idle process is measured: three renew rounds
// of the clustered profile (renew_interval 10s).
const idleWindow = 30 * time.Second

// manyConfig: the clustered profile (lease_ttl 45s, renew_interval 10s,
// jitter 1s), one Modbus device per session polled every 10s and
// published on change, one MQTT broker. %[1]s etcd, %[2]s broker URL,
// %[3]s the HTTP address; devices and routes follow.
const manyConfig = `deployment_mode: clustered
node: many
http_listen: %[3]s
lease_store: {endpoints: ["%[1]s"], key_prefix: /many/}
manager:
  broker_health_step_down: "off"
  failover_slo: 900s
brokers:
  local: {url: "%[2]s", connect_timeout: 10s, reconcile_timeout: 10s, unmatched_grace: 1s}
`

func writeManyConfig(tb testing.TB, etcd, broker string, modbusAddrs []string, httpAddr string) (string, *routes.Config) {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, manyConfig, etcd, broker, httpAddr)
	b.WriteString("devices:\n")
	for i := range manySessions {
		fmt.Fprintf(&b, "  d%04d: {kind: modbus_tcp, address: \"%s\", groups: [{name: g, interval: 10s, tags: [{name: cycles, register: holding, address: 0, type: uint16}]}]}\n", i, modbusAddrs[i])
	}
	b.WriteString("routes:\n")
	for i := range manySessions {
		fmt.Fprintf(&b, "  - {name: r%04d, session: s%04d, kind: poll, device: d%04d, broker: local}\n", i, i, i)
	}
	path := filepath.Join(tb.TempDir(), "many.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := routes.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	return path, cfg
}

// procStat returns a process's user+system CPU time and its resident and
// peak resident set sizes in bytes.
func procStat(pid int) (cpu time.Duration, rss, hwm int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields of the whole line.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	cpu = time.Duration(ut+st) * time.Second / hz
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb * 1024
		case "VmHWM":
			hwm = kb * 1024
		}
	}
	return cpu, rss, hwm, nil
}

// statusKB is one field of /proc/PID/status in kB, such as RssFile: the
// resident pages mapped from files (the binary's code and data), which
// the Go runtime's own figures leave out.
func statusKB(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// metricSum adds up the samples of a Prometheus text exposition whose line
// starts with name and contains every label in labels.
func metricSum(url, name string, labels ...string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// readyCount counts the sessions the process owns at ServiceLevelFull.
func readyCount(httpAddr string) (int, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Sessions []failover.SessionStatus `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range body.Sessions {
		if s.Owner && s.ServiceLevelFull {
			n++
		}
	}
	return n, nil
}

// BenchmarkThousandSessions runs one `leasebridge run` process holding
// 1,000 sessions (each a Modbus connection and an MQTT connection, against
// a single Debian etcd member and one mosquitto), waits until every
// session is at ServiceLevelFull, then measures the idle process over
// idleWindow: RSS, CPU and the etcd requests per renew round. It runs once
// whatever b.N is.
func BenchmarkThousandSessions(b *testing.B) {
	b.Run("default", func(b *testing.B) { thousandSessions(b, "", "sessions/1000") })
	// The baselines: the same process at GOGC=50, run's setting before
	// failover.GCPercent became 25, and at Go's default GOGC=100.
	b.Run("gogc=50", func(b *testing.B) { thousandSessions(b, "50", "sessions/1000-gogc50") })
	b.Run("gogc=100", func(b *testing.B) { thousandSessions(b, "100", "sessions/1000-gogc100") })
}

// thousandSessions is one measurement; gogc, when not empty, is the
// process's GOGC, and name is its record.
func thousandSessions(b *testing.B, gogc, name string) {
	etcd := testetcd.StartBinary(b, 1)
	broker := testmqtt.StartMosquitto(b, testmqtt.MosquittoConfig{})
	modbusAddrs := startModbusMany(b, manySessions)
	httpAddr := testbin.FreeAddr(b)
	path, cfg := writeManyConfig(b, etcd.Endpoints()[0], broker.URL, modbusAddrs, httpAddr)
	reps := admit(b, cfg)
	renew := reps[0].Timing.RenewInterval

	logf, err := os.Create(filepath.Join(b.TempDir(), "many.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(testbin.Leasebridge(b), "run", "-c", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Measure the process as it runs by default: without the caller's
	// garbage-collector settings (run sets failover.GCPercent itself).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if gogc != "" {
		cmd.Env = append(cmd.Env, "GOGC="+gogc)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		n, err := readyCount(httpAddr)
		if err == nil && n == manySessions {
			break
		}
		select {
		case err := <-done:
			b.Fatalf("leasebridge run exited: %v", err)
		case <-ctx.Done():
			b.Fatalf("%d of %d sessions at ServiceLevelFull after %s (%v)", n, manySessions, time.Since(start), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	allFull := time.Since(start)
	// Let the takeover burst settle before measuring the idle process.
	time.Sleep(renew)

	metrics := etcd.Endpoints()[0] + "/metrics"
	kv := func(method string) float64 {
		v, err := metricSum(metrics, "grpc_server_handled_total", `grpc_method="`+method+`"`, `grpc_service="etcdserverpb.KV"`)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	txn0, range0 := kv("Txn"), kv("Range")
	cpu0, _, _, err := procStat(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(idleWindow)
	cpu1, rss, hwm, err := procStat(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	fileRSS, err := statusKB(cmd.Process.Pid, "RssFile")
	if err != nil {
		b.Fatal(err)
	}
	txn1, range1 := kv("Txn"), kv("Range")
	lbMetrics := "http://" + httpAddr + "/metrics"
	goroutines, err := metricSum(lbMetrics, "go_goroutines")
	if err != nil {
		b.Fatal(err)
	}
	stack, _ := metricSum(lbMetrics, "go_memstats_stack_inuse_bytes")
	heap, _ := metricSum(lbMetrics, "go_memstats_heap_inuse_bytes")
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		b.Fatal(errors.New("leasebridge run ended during the measurement"))
	}
	idleProfiles(b, cmd.Process, logf.Name())
	rounds := el.Seconds() / renew.Seconds()
	m := map[string]float64{
		"sessions":             manySessions,
		"all_full_s":           allFull.Seconds(),
		"rss_MB":               float64(rss) / (1 << 20),
		"peak_rss_MB":          float64(hwm) / (1 << 20),
		"rss_file_MB":          float64(fileRSS) / (1 << 10),
		"cpu_idle_pct":         100 * (cpu1 - cpu0).Seconds() / el.Seconds(),
		"txn_per_round":        (txn1 - txn0) / rounds,
		"range_per_round":      (range1 - range0) / rounds,
		"renew_interval_s":     renew.Seconds(),
		"window_s":             el.Seconds(),
		"goroutines":           goroutines,
		"stack_inuse_MB":       stack / (1 << 20),
		"heap_inuse_MB":        heap / (1 << 20),
		"etcd_reqs_per_second": (txn1 - txn0 + range1 - range0) / el.Seconds(),
	}
	for _, k := range []string{"rss_MB", "peak_rss_MB", "cpu_idle_pct", "txn_per_round", "range_per_round"} {
		b.ReportMetric(m[k], k)
	}
	record(b, name, result{N: 1, Metrics: m})
}

// idleProfiles asks the idle process for its heap and goroutine profiles
// when LEASEBRIDGE_PROFILE_DIR is set (the process inherits it, see
// cmd/leasebridge/profile.go) and waits until its log says they were
// written. Unset, it does nothing: a measured run is not disturbed.
func idleProfiles(b *testing.B, p *os.Process, logPath string) {
	dir := os.Getenv("LEASEBRIDGE_PROFILE_DIR")
	if dir == "" {
		return
	}
	// The process's mappings: which of its resident pages are the
	// binary's, which the heap's and stacks'.
	if smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", p.Pid)); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "smaps.txt"), smaps, 0o644)
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		log, err := os.ReadFile(logPath)
		if err != nil {
			b.Fatal(err)
		}
		if strings.Contains(string(log), "profiles written") {
			b.Logf("idle heap and goroutine profiles in %s", dir)
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("no profiles in %s after a minute", dir)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
