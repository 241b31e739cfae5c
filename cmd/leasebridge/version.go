package main

import (
	"fmt"
	"io"

	"github.com/leasebridge/leasebridge/internal/buildinfo"
)

// version prints the build stamp (`leasebridge version`, `--version`).
func version(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("version", stdout, stderr)
	if err := fl.parse(args); err != nil {
		return flagStatus(err)
	}
	fmt.Fprintln(stdout, buildinfo.Read())
	return exitOK
}

const versionAbout = `
The build stamp the Go toolchain wrote into the binary: module version
(a tag, or a pseudo-version), VCS revision with a dirty flag, commit time and
Go version. The leasebridge_build_info metric carries the same values.
`

const versionExamples = `  # what is running
  leasebridge version
  # the same, as a flag
  leasebridge --version
`
