// Package examples holds the tests of the deployment examples: the systemd
// unit against systemd-analyze, the alert rules against promtool. The
// Kubernetes manifests are checked in examples/kubernetes, a package of
// their own so that only that test binary links k8s.io/api.
package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/internal/testbin"
)

// maxExposure is the highest `systemd-analyze security` exposure the unit
// may score (0 is fully locked down, 10 fully exposed; 3.0 is still "OK").
const maxExposure = 3.0

// The bridge's unit and the store member's.
const (
	unitFile      = "systemd/leasebridge.service"
	storeUnitFile = "systemd/leasebridge-store.service"
)

// unitForBinary copies a unit into a temporary directory with its
// commands pointing at a binary built from this tree, since `verify`
// checks that every command is executable.
func unitForBinary(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(raw), "/usr/local/bin/leasebridge", testbin.Leasebridge(t))
	path := filepath.Join(t.TempDir(), filepath.Base(file))
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func systemdAnalyze(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed (Debian package systemd; scripts/test installs it): %v", err)
	}
	cmd := exec.Command(bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("systemd-analyze %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// `systemd-analyze verify` accepts both units without a warning (it only
// warns, exit 0, about a directive it ignores).
func TestSystemdUnitVerifies(t *testing.T) {
	for _, f := range []string{unitFile, storeUnitFile} {
		out, errs := systemdAnalyze(t, "verify", unitForBinary(t, f))
		if strings.TrimSpace(out+errs) != "" {
			t.Errorf("systemd-analyze verify %s:\n%s%s", f, out, errs)
		}
	}
}

var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// securityScore is the unit's `systemd-analyze security` exposure, as
// printed, after checking it is at most maxExposure.
func securityScore(t *testing.T, file string) string {
	t.Helper()
	out, errs := systemdAnalyze(t, "security", "--offline=yes", "--no-pager", unitForBinary(t, file))
	m := exposure.FindStringSubmatch(out + errs)
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze security output:\n%s%s", out, errs)
	}
	score, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: systemd-analyze security exposure %.1f (at most %.1f)", file, score, maxExposure)
	if score > maxExposure {
		t.Errorf("%s: exposure %.1f > %.1f:\n%s", file, score, maxExposure, out)
	}
	return m[1]
}

// directives are the unit's lines, trimmed.
func directives(t *testing.T, file string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		d[strings.TrimSpace(l)] = true
	}
	return d
}

// mentions checks that each document says its phrase, spaces collapsed.
func mentions(t *testing.T, phrases map[string]string) {
	t.Helper()
	for doc, want := range phrases {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(raw)), " "), want) {
			t.Errorf("%s does not say %q, the measured score", doc, want)
		}
	}
}

// The unit scores at most maxExposure in `systemd-analyze security`, and
// keeps what the bridge needs: serial devices for Modbus RTU, no restart
// of an invalid or refused configuration, the watchdog.
func TestSystemdUnitSecurity(t *testing.T) {
	score := securityScore(t, unitFile)
	mentions(t, map[string]string{
		"../docs/install-systemd.md": "security leasebridge` scores it " + score + " (OK)",
		"../README.md":               "`systemd-analyze security` exposure " + score + ",",
	})
	have := directives(t, unitFile)
	for _, want := range []string{
		"Type=notify", "WatchdogSec=10s", "Restart=on-failure", "RestartPreventExitStatus=1 2",
		"SupplementaryGroups=dialout", "DeviceAllow=char-ttyS rw", "DeviceAllow=char-ttyUSB rw", "DeviceAllow=char-ttyACM rw",
		"StateDirectory=leasebridge", "NoNewPrivileges=yes", "CapabilityBoundingSet=", "UMask=0077",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "SystemCallFilter=@system-service",
	} {
		if !have[want] {
			t.Errorf("%s lacks %q", unitFile, want)
		}
	}
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	checkRestartDocs(t, raw)
	// PrivateDevices=yes would hide the serial ports DeviceAllow opens.
	if have["PrivateDevices=yes"] {
		t.Errorf("%s sets PrivateDevices=yes: Modbus RTU needs /dev/tty*", unitFile)
	}
}

// The store member's unit scores at most maxExposure too, restarts on
// anything but an invalid file, shares the bridge unit's dynamic user and
// state directory, and is bound to no other unit either way: a bridge's
// step-down, crash loop or upgrade never stops the member.
func TestStoreUnit(t *testing.T) {
	score := securityScore(t, storeUnitFile)
	mentions(t, map[string]string{"../docs/install-systemd.md": "security leasebridge-store` scores it " + score + " (OK)"})
	have := directives(t, storeUnitFile)
	for _, want := range []string{
		"ExecStart=/usr/local/bin/leasebridge store -c /etc/leasebridge/config.yaml",
		"Restart=on-failure", "RestartPreventExitStatus=2", "DynamicUser=yes", "User=leasebridge",
		"StateDirectory=leasebridge", "PrivateDevices=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=", "UMask=0077",
		"LoadCredential=member.key:/etc/leasebridge/pki/member.key",
	} {
		if !have[want] {
			t.Errorf("%s lacks %q", storeUnitFile, want)
		}
	}
	for _, f := range []string{unitFile, storeUnitFile} {
		for line := range directives(t, f) {
			for _, bind := range []string{"Requires=", "BindsTo=", "PartOf=", "Requisite=", "Upholds="} {
				if strings.HasPrefix(line, bind) {
					t.Errorf("%s: %s ties the bridge's and the member's lifetimes", f, line)
				}
			}
		}
	}
	// The bridge unit's dynamic user is named after it; the store unit
	// names the same user so both own StateDirectory.
	if filepath.Base(unitFile) != "leasebridge.service" {
		t.Errorf("the bridge unit is %s, not leasebridge.service: User=leasebridge no longer shares its user", unitFile)
	}
}

// checkRestartDocs checks that docs/operations.md's exit table says of
// every status the unit does not restart on that systemd does not
// restart it, and never that a restart retries.
func checkRestartDocs(t *testing.T, unit []byte) {
	t.Helper()
	page, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var prevent []string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "RestartPreventExitStatus="); ok {
			prevent = append(prevent, strings.Fields(v)...)
		}
	}
	if len(prevent) == 0 {
		t.Fatal("the unit has no RestartPreventExitStatus")
	}
	// The run command's table, which follows this sentence (the store
	// command's has its own, for its own unit).
	_, runTable, _ := strings.Cut(string(page), "Every exit status of `leasebridge run`")
	for _, status := range prevent {
		row := ""
		for _, l := range strings.Split(runTable, "\n") {
			if strings.HasPrefix(l, "| "+status+" |") {
				row = l
				break
			}
		}
		switch {
		case row == "":
			t.Errorf("docs/operations.md has no exit-table row for %s", status)
		case strings.Contains(row, "a restart retries"):
			t.Errorf("docs/operations.md says a restart retries exit %s, which the unit does not restart: %s", status, row)
		case status != "2" && !strings.Contains(row, "systemd unit does not restart"):
			t.Errorf("docs/operations.md's row for exit %s does not say the systemd unit does not restart it: %s", status, row)
		}
	}
}
