package buildinfo

import (
	"fmt"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0+dirty"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T15:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: ""}}
	for _, c := range []struct {
		bi           *debug.BuildInfo
		line, labels string
	}{
		{stamped, "leasebridge v0.1.0+dirty revision 0123abcd (dirty) 2026-12-01T15:00:00Z go1.26.8", "[v0.1.0+dirty 0123abcd true go1.26.8]"},
		{unstamped, "leasebridge (devel) (no VCS information: built with -buildvcs=false or outside a repository) go1.26.8", "[(devel) unknown false go1.26.8]"},
	} {
		in := FromBuildInfo(c.bi)
		if got := in.String(); got != c.line {
			t.Errorf("String() = %q, want %q", got, c.line)
		}
		if got := fmt.Sprint(in.Labels()); got != c.labels {
			t.Errorf("Labels() = %s, want %s", got, c.labels)
		}
	}
}
