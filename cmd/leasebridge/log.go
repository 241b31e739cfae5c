package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/leasebridge/leasebridge/internal/redact"
)

// logLevels are the values --log-level accepts.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// newLogger returns the process logger in format json or text at level.
// Every message and attribute passes through redactAttr, so a password
// inside a URL never reaches the log, whichever package built the line.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	lv, ok := logLevels[level]
	if !ok {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: redactAttr}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", format)
}

// redactAttr removes URL passwords from strings, errors, string lists and
// anything printed through a String method.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(redact.Text(v.String()))
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(redact.Text(x.Error()))
		case []string:
			out := make([]string, len(x))
			for i, s := range x {
				out[i] = redact.Text(s)
			}
			a.Value = slog.AnyValue(out)
		case fmt.Stringer:
			a.Value = slog.StringValue(redact.Text(x.String()))
		}
	}
	return a
}
