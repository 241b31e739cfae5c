package main

import (
	"fmt"
	"io"

	"github.com/leasebridge/leasebridge/internal/buildinfo"
)

// version prints the build stamp (`leasebridge version`, `--version`).
func version(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("version", stderr)
	if err := parseFlags(fl, args); err != nil {
		return flagStatus(err)
	}
	fmt.Fprintln(stdout, buildinfo.Read())
	return exitOK
}
