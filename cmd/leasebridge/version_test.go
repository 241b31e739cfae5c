package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/buildinfo"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// goVersionM is what `go version -m` says about a binary.
type goVersionM struct {
	goVersion, modVersion, revision, time string
	dirty                                 bool
}

func readGoVersionM(t *testing.T, bin string) goVersionM {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	g := goVersionM{revision: buildinfo.Unknown, time: buildinfo.Unknown}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case !strings.HasPrefix(line, "\t"):
			g.goVersion = strings.TrimSpace(line[strings.LastIndex(line, ":")+1:])
		case f[0] == "mod" && len(f) >= 3:
			g.modVersion = f[2]
		case f[0] == "build" && len(f) == 2:
			k, v, _ := strings.Cut(f[1], "=")
			switch k {
			case "vcs.revision":
				g.revision = v
			case "vcs.time":
				g.time = v
			case "vcs.modified":
				g.dirty = v == "true"
			}
		}
	}
	return g
}

// stampedTree copies the module's files into a fresh git repository (a
// worktree's .git file is not stamped by the toolchain) and commits them.
func stampedTree(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dir := t.TempDir()
	for _, f := range strings.Fields(string(out)) {
		if strings.Contains(f, "node_modules/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("../..", f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "test tree")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	args = append([]string{"-C", dir, "-c", "user.name=test", "-c", "user.email=test@leasebridge.invalid"}, args...)
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// buildStamped builds cmd/leasebridge in dir with VCS stamping on, whatever
// GOFLAGS the machine sets.
func buildStamped(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leasebridge")
	cmd := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", bin, "./cmd/leasebridge")
	cmd.Dir = dir
	// The flags of scripts/release (and the image), so the build cache is shared.
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func binOutput(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out)
}

// checkVersion asserts that `version`, `--version` and `admit --json` print
// what `go version -m` reads from the same binary.
func checkVersion(t *testing.T, bin string) goVersionM {
	t.Helper()
	g := readGoVersionM(t, bin)
	want := buildinfo.Info{Version: g.modVersion, Revision: g.revision, Dirty: g.dirty, Time: g.time, GoVersion: g.goVersion}.String() + "\n"
	for _, arg := range []string{"version", "--version"} {
		if got := binOutput(t, bin, arg); got != want {
			t.Errorf("%s: %q, go version -m says %q", arg, got, want)
		}
	}
	var doc struct {
		SchemaVersion      int    `json:"schema_version"`
		LeasebridgeVersion string `json:"leasebridge_version"`
	}
	if err := json.Unmarshal([]byte(binOutput(t, bin, "admit", "-c", "../../examples/clustered-sidecar.yaml", "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.LeasebridgeVersion != g.modVersion || doc.SchemaVersion != 1 {
		t.Errorf("admit --json: schema_version %d leasebridge_version %q; want 1 and %q", doc.SchemaVersion, doc.LeasebridgeVersion, g.modVersion)
	}
	return g
}

// `version` and admit --json agree with `go version -m` for a binary built
// from a clean commit, from a tagged and modified tree, and for one built
// without VCS information (this package's own test binary).
func TestVersionAgreesWithGoVersionM(t *testing.T) {
	dir := stampedTree(t)
	head := git(t, dir, "rev-parse", "HEAD")
	clean := checkVersion(t, buildStamped(t, dir))
	if clean.revision != head || clean.dirty || !strings.HasPrefix(clean.modVersion, "v0.0.0-") {
		t.Errorf("clean build: %+v; want revision %s, not dirty, a pseudo-version", clean, head)
	}

	git(t, dir, "tag", "v0.1.0")
	if err := os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte("a local change\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildStamped(t, dir)
	dirty := checkVersion(t, bin)
	if dirty.revision != head || !dirty.dirty || dirty.modVersion != "v0.1.0+dirty" {
		t.Errorf("tagged, modified build: %+v; want revision %s, dirty, v0.1.0+dirty", dirty, head)
	}
	checkBuildInfoMetric(t, bin, dirty)

	// testbin builds without stamping on machines whose GOFLAGS say so.
	checkVersion(t, testbin.Leasebridge(t))
}

// checkBuildInfoMetric runs the binary (a standalone node on its embedded
// store, its device and broker unreachable) and reads
// leasebridge_build_info from /metrics.
func checkBuildInfoMetric(t *testing.T, bin string, g goVersionM) {
	t.Helper()
	addr := testbin.FreeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`deployment_mode: standalone
node: gw
data_dir: %s
http_listen: %s
brokers:
  local: {url: "tcp://127.0.0.1:1"}
devices:
  plc: {kind: modbus_tcp, address: "127.0.0.1:1", groups: [{name: g, interval: 1s, tags: [{name: c, register: holding, address: 0, type: uint16}]}]}
routes:
  - {name: telemetry, session: plc, kind: poll, device: plc, broker: local}
`, t.TempDir(), addr))
	cmd := exec.Command(bin, "run", "-c", cfg)
	logf, err := os.Create(filepath.Join(t.TempDir(), "run.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	want := fmt.Sprintf(`leasebridge_build_info{dirty="%t",go_version="%s",revision="%s",version="%s"} 1`, g.dirty, g.goVersion, g.revision, g.modVersion)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if body := scrape(ctx, "http://"+addr+"/metrics"); strings.Contains(body, "leasebridge_build_info") {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "leasebridge_build_info"))
			}
			return
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("leasebridge run exited: %v\n%s", err, b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	b, _ := os.ReadFile(logf.Name())
	t.Fatalf("no leasebridge_build_info on /metrics within 2m\n%s", b)
}

func scrape(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
