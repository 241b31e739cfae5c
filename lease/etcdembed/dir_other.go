//go:build !unix

package etcdembed

import "log/slog"

// lockDir is a no-op where flock is unavailable; etcd's own database lock
// still keeps a second process out, by waiting.
func lockDir(string) (func(), error) { return func() {}, nil }

// warnFree is a no-op where statfs is unavailable.
func warnFree(*slog.Logger, string) {}
