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

const unitFile = "systemd/leasebridge.service"

// unitForBinary copies the unit into a temporary directory with its
// commands pointing at a binary built from this tree, since `verify`
// checks that every command is executable.
func unitForBinary(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(raw), "/usr/local/bin/leasebridge", testbin.Leasebridge(t))
	path := filepath.Join(t.TempDir(), "leasebridge.service")
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

// `systemd-analyze verify` accepts the unit without a warning (it only
// warns, exit 0, about a directive it ignores).
func TestSystemdUnitVerifies(t *testing.T) {
	out, errs := systemdAnalyze(t, "verify", unitForBinary(t))
	if strings.TrimSpace(out+errs) != "" {
		t.Errorf("systemd-analyze verify:\n%s%s", out, errs)
	}
}

var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// The unit scores at most maxExposure in `systemd-analyze security`, and
// keeps what the bridge needs: serial devices for Modbus RTU, no restart
// of an invalid or refused configuration, the watchdog.
func TestSystemdUnitSecurity(t *testing.T) {
	out, errs := systemdAnalyze(t, "security", "--offline=yes", "--no-pager", unitForBinary(t))
	m := exposure.FindStringSubmatch(out + errs)
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze security output:\n%s%s", out, errs)
	}
	score, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security exposure %.1f (at most %.1f)", score, maxExposure)
	if score > maxExposure {
		t.Errorf("exposure %.1f > %.1f:\n%s", score, maxExposure, out)
	}
	for doc, want := range map[string]string{
		"../docs/install-systemd.md": "security leasebridge` scores it " + m[1] + " (OK)",
		"../README.md":               "`systemd-analyze security` exposure " + m[1] + ",",
	} {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(raw)), " "), want) {
			t.Errorf("%s does not say %q, the measured score", doc, want)
		}
	}
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	directives := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		directives[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{
		"Type=notify", "WatchdogSec=10s", "Restart=on-failure", "RestartPreventExitStatus=1 2",
		"SupplementaryGroups=dialout", "DeviceAllow=char-ttyS rw", "DeviceAllow=char-ttyUSB rw", "DeviceAllow=char-ttyACM rw",
		"StateDirectory=leasebridge", "NoNewPrivileges=yes", "CapabilityBoundingSet=", "UMask=0077",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "SystemCallFilter=@system-service",
	} {
		if !directives[want] {
			t.Errorf("%s lacks %q", unitFile, want)
		}
	}
	// PrivateDevices=yes would hide the serial ports DeviceAllow opens.
	if directives["PrivateDevices=yes"] {
		t.Errorf("%s sets PrivateDevices=yes: Modbus RTU needs /dev/tty*", unitFile)
	}
}
