// Package buildinfo reads what the Go toolchain stamped into the running
// binary (module version, VCS revision, dirty flag, commit time, Go
// version), so that `leasebridge version`, the leasebridge_build_info
// metric and `admit --json` report the same build.
package buildinfo

import (
	"debug/buildinfo"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Unknown stands for a field the toolchain did not stamp (a build with
// -buildvcs=false, or outside a repository).
const Unknown = "unknown"

// Info is one binary's build stamp.
type Info struct {
	// Version is the main module's version: a tag, a pseudo-version
	// derived from the VCS, or "(devel)" when the toolchain knew neither.
	Version string `json:"version"`
	// Revision is vcs.revision, or Unknown.
	Revision string `json:"revision"`
	// Dirty is vcs.modified: the tree had uncommitted changes.
	Dirty bool `json:"dirty"`
	// Time is vcs.time (RFC 3339), or Unknown.
	Time string `json:"time"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's build stamp.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(devel)", Revision: Unknown, Time: Unknown, GoVersion: runtime.Version()}
	}
	return FromBuildInfo(bi)
}

// FromBinary reads the stamp of the Go binary at path.
func FromBinary(path string) (Info, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return Info{}, fmt.Errorf("buildinfo: %s: %w", path, err)
	}
	return FromBuildInfo(bi), nil
}

// FromBuildInfo extracts the stamp from bi.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, Revision: Unknown, Time: Unknown, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Dirty, _ = strconv.ParseBool(s.Value)
		}
	}
	return in
}

// String is the one-line form `leasebridge version` prints, e.g.
// "leasebridge v0.1.0 revision 0123abc (dirty) 2026-12-01T15:00:00Z go1.26.8".
func (in Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leasebridge %s", in.Version)
	if in.Revision == Unknown {
		b.WriteString(" (no VCS information: built with -buildvcs=false or outside a repository)")
	} else {
		fmt.Fprintf(&b, " revision %s", in.Revision)
		if in.Dirty {
			b.WriteString(" (dirty)")
		}
		fmt.Fprintf(&b, " %s", in.Time)
	}
	fmt.Fprintf(&b, " %s", in.GoVersion)
	return b.String()
}

// Labels are the leasebridge_build_info labels in the order of LabelNames.
func (in Info) Labels() []string {
	return []string{in.Version, in.Revision, strconv.FormatBool(in.Dirty), in.GoVersion}
}

// LabelNames are the labels of leasebridge_build_info.
var LabelNames = []string{"version", "revision", "dirty", "go_version"}
