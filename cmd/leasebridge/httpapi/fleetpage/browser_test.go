package fleetpage_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/failover"
	"github.com/leasebridge/leasebridge/fleetview"
	"github.com/leasebridge/leasebridge/internal/fleettest"
	"github.com/leasebridge/leasebridge/internal/testbin"
)

// browserLimit bounds one chromium run: a hang guard on a loaded machine.
const browserLimit = 90 * time.Second

// chromium is Debian's headless browser; a missing one fails the test
// (scripts/test installs it), because a skipped browser test would hide
// the missing coverage.
func chromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found on PATH (%v): apt-get install -y --no-install-recommends chromium (scripts/test does)", err)
	}
	return p
}

// browse runs headless chromium with args and returns its standard output.
func browse(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserLimit)
	defer cancel()
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(flags, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// dom is the page at url as chromium rendered it.
func dom(t *testing.T, bin, url string) string {
	t.Helper()
	d := string(browse(t, bin, "--dump-dom", url))
	if !strings.Contains(d, `id="sessions"`) {
		t.Fatalf("chromium rendered no sessions table from %s:\n%s", url, d)
	}
	return d
}

// screenshot keeps a picture of the page at url as a test artifact, under
// $LEASEBRIDGE_ARTIFACTS when set: never in the repository.
func screenshot(t *testing.T, bin, url, name string) {
	t.Helper()
	dir := os.Getenv("LEASEBRIDGE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	browse(t, bin, "--screenshot="+file, "--window-size=1280,900", url)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot %s: %v", file, err)
	}
	if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 900 {
		t.Errorf("screenshot is %v, want 1280x900", sz)
	}
	t.Logf("screenshot: %s", file)
}

var attrRE = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)

// row finds the table row whose data-KIND is name and returns its
// attributes, the attributes of its failover cell (if any) and its text.
func row(t *testing.T, d, kind, name string) (attrs, failover map[string]string, text string) {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr (data-` + kind + `="` + regexp.QuoteMeta(name) + `"[^>]*)>(.*?)</tr>`)
	m := re.FindStringSubmatch(d)
	if m == nil {
		t.Fatalf("no %s row %q in the page:\n%s", kind, name, d)
	}
	attrs = map[string]string{}
	for _, a := range attrRE.FindAllStringSubmatch(m[1], -1) {
		attrs[a[1]] = a[2]
	}
	if c := regexp.MustCompile(`<td class="failover[^"]*"([^>]+)>`).FindStringSubmatch(m[2]); c != nil {
		failover = map[string]string{}
		for _, a := range attrRE.FindAllStringSubmatch(c[1], -1) {
			failover[a[1]] = a[2]
		}
	}
	return attrs, failover, regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[2], " ")
}

// waitFleet polls p's /fleet until ok accepts it.
func waitFleet(t *testing.T, p *fleettest.Proc, limit time.Duration, what string, ok func(fleetview.Status) bool) {
	t.Helper()
	testbin.Observe(t, limit, func() (bool, string) {
		st, err := p.FleetView(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return ok(st), fmt.Sprintf("%s: /fleet not %s: %+v", p.Node, what, st)
	})
}

// ownedBy holds when every session is owned by node at ServiceLevelFull
// and node's row is live.
func ownedBy(node string) func(fleetview.Status) bool {
	return func(st fleetview.Status) bool {
		live := false
		for _, n := range st.Nodes {
			live = live || (n.Node == node && n.Live)
		}
		for _, s := range st.Sessions {
			if s.Node != node || s.ServiceLevel != "full" {
				return false
			}
		}
		return live && len(st.Sessions) == len(fleettest.Sessions)
	}
}

// The fleet page of a running fleet, as a real browser renders it: before
// the owner is killed it shows node-a holding both sessions; after, node-b
// holds them at a higher epoch, node-a is down, and node-b's page shows the
// takeover it measured against the budget admission gave, with its cause.
func TestFleetPageInBrowserBeforeAndAfterTakeover(t *testing.T) {
	bin := chromium(t)
	f := fleettest.Start(t)
	budget := f.Budget(t)
	limit := 2*budget + 30*time.Second // hang guards, not timing assertions
	a := f.Run(t, "node-a")
	a.Wait(t, limit, "owning", fleettest.Owning)
	b := f.Run(t, "node-b")
	b.Wait(t, limit, "standing by", fleettest.Standing)
	waitFleet(t, b, limit, "owned by node-a with node-b live", func(st fleetview.Status) bool {
		bLive := false
		for _, n := range st.Nodes {
			bLive = bLive || (n.Node == "node-b" && n.Live)
		}
		return bLive && ownedBy("node-a")(st)
	})

	before := dom(t, bin, b.URL("/"))
	epochs := map[string]uint64{}
	for _, s := range fleettest.Sessions {
		attrs, fo, _ := row(t, before, "session", s)
		if attrs["data-owner-node"] != "node-a" || attrs["data-service-level"] != "full" {
			t.Errorf("before: %s row %v, want owner node-a at service level full", s, attrs)
		}
		if fo != nil {
			t.Errorf("before: node-b, a standby, shows a failover it measured for %s: %v", s, fo)
		}
		epochs[s], _ = strconv.ParseUint(attrs["data-epoch"], 10, 64)
		if epochs[s] == 0 {
			t.Errorf("before: %s epoch %q", s, attrs["data-epoch"])
		}
	}
	if attrs, _, text := row(t, before, "node", "node-a"); attrs["data-state"] != "live" || attrs["data-held"] != "2" {
		t.Errorf("before: node-a row %v %q, want live holding 2", attrs, text)
	}
	if attrs, _, _ := row(t, before, "node", "node-b"); attrs["data-state"] != "live" || attrs["data-held"] != "0" {
		t.Errorf("before: node-b row %v, want live holding 0", attrs)
	}
	screenshot(t, bin, b.URL("/"), "fleetpage-before.png")

	a.Kill(t)
	local := b.Wait(t, limit, "owning", fleettest.Owning)
	waitFleet(t, b, limit, "owned by node-b with node-a down", func(st fleetview.Status) bool {
		for _, n := range st.Nodes {
			if n.Node == "node-a" && n.Live {
				return false
			}
		}
		return ownedBy("node-b")(st)
	})
	after := dom(t, bin, b.URL("/"))
	checkAfter(t, after, local, epochs)
	if attrs, _, _ := row(t, after, "node", "node-a"); attrs["data-state"] != "down" || attrs["data-held"] != "0" {
		t.Errorf("after: node-a row %v, want down holding 0", attrs)
	}
	screenshot(t, bin, b.URL("/"), "fleetpage-after.png")
}

// checkAfter checks each session's row after the takeover against what
// node-b's /sessions reported.
func checkAfter(t *testing.T, d string, local []failover.SessionStatus, before map[string]uint64) {
	t.Helper()
	for _, s := range local {
		attrs, fo, text := row(t, d, "session", s.Session)
		if attrs["data-owner-node"] != "node-b" || attrs["data-service-level"] != "full" {
			t.Errorf("after: %s row %v, want owner node-b at service level full", s.Session, attrs)
		}
		if e, _ := strconv.ParseUint(attrs["data-epoch"], 10, 64); e <= before[s.Session] {
			t.Errorf("after: %s epoch %d, was %d before the takeover", s.Session, e, before[s.Session])
		}
		if fo == nil {
			t.Errorf("after: %s shows no measured failover: %q", s.Session, text)
			continue
		}
		want := map[string]string{"data-cause": failover.CauseOwnerDeath,
			"data-measured-ns": strconv.FormatInt(s.FailureToFullNS, 10), "data-budget-ns": strconv.FormatInt(s.OwnerDeathBudgetNS, 10)}
		for k, v := range want {
			if fo[k] != v {
				t.Errorf("after: %s failover cell %s=%q, want %q (/sessions %+v)", s.Session, k, fo[k], v, s)
			}
		}
		shown := fmt.Sprintf("%s of %s budget", admission.FormatSecondsShort(time.Duration(s.FailureToFullNS)),
			admission.FormatSecondsShort(time.Duration(s.OwnerDeathBudgetNS)))
		if !strings.Contains(text, shown) || !strings.Contains(text, "cause owner_death") {
			t.Errorf("after: %s row text %q lacks %q and its cause", s.Session, text, shown)
		}
	}
}
