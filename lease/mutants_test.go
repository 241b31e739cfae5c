//go:build !leasemutants

package lease

import (
	"testing"

	"github.com/leasebridge/leasebridge/lease/internal/hook"
)

// A build without -tags leasemutants, such as every release, has no way
// to switch a Core into a broken fence mode: the hook is never installed.
func TestReleaseBuildHasNoFenceMutants(t *testing.T) {
	if hook.SetFenceMode != nil {
		t.Fatal("hook.SetFenceMode is installed in a build without -tags leasemutants")
	}
	if (mutation{}).on() {
		t.Fatal("a Core of a release build reports a broken fence mode")
	}
}
