package kubestore

import (
	"regexp"
	"strings"
	"testing"
)

// Every Lease name the store makes is a valid DNS subdomain whose labels
// are at most 63 characters (what the API server requires of a Lease
// name), and distinct keys and prefixes get distinct names.
func TestNamesAreValidAndDistinct(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	seen := map[string]string{}
	for _, prefix := range []string{"/leasebridge/", "/plant/a/", "/", "x/", "/Plant/", "/" + strings.Repeat("a", 60) + "/"} {
		for _, key := range []string{"s1", "Press_1", "a.b", "---", "ä", strings.Repeat("x", 63), strings.Repeat("x", 64), strings.Repeat("Y", 300)} {
			name := rowName(fleetName(prefix), key)
			if len(name) > 253 {
				t.Errorf("%q %q: name %q longer than 253", prefix, key, name)
			}
			for _, l := range strings.Split(name, ".") {
				if len(l) > 63 || !label.MatchString(l) {
					t.Errorf("%q %q: name %q has label %q", prefix, key, name, l)
				}
			}
			if other, dup := seen[name]; dup {
				t.Errorf("%q %q and %s share the name %q", prefix, key, other, name)
			}
			seen[name] = prefix + " " + key
		}
	}
	if got := rowName(fleetName("/leasebridge/"), "press-1"); got != "leasebridge.press-1" {
		t.Errorf("readable name %q, want leasebridge.press-1", got)
	}
	for _, ep := range []string{"tcp://plc:502", "modbus_rtu:/dev/ttyUSB0 on gateway-7"} {
		if n := ClaimName(ep); !label.MatchString(n) || len(n) > 63 {
			t.Errorf("claim name %q", n)
		}
	}
}
