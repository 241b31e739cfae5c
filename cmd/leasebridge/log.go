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

// processFlags are the flags of the commands that run a process until a
// signal (run, store): -c FILE, --log-format and --log-level.
type processFlags struct {
	file, format, level *string
}

// addProcessFlags declares the process flags on fl.
func addProcessFlags(fl *flagSet) processFlags {
	return processFlags{
		file:   fl.String("c", "", "the configuration `FILE` (required)"),
		format: fl.String("log-format", "json", "log as `json|text`"),
		level:  fl.String("log-level", "info", "the least severe level logged: `debug|info|warn|error`"),
	}
}

// parse parses args on fl, requires -c FILE and builds the logger on
// stderr. When the command must stop (help, a usage error) log is nil and
// status is its exit status.
func (p processFlags) parse(fl *flagSet, args []string, stderr io.Writer) (log *slog.Logger, status int) {
	if err := fl.parse(args); err != nil {
		return nil, flagStatus(err)
	}
	if *p.file == "" {
		return nil, fl.usageError("-c FILE is required")
	}
	log, err := newLogger(stderr, *p.format, *p.level)
	if err != nil {
		return nil, fl.usageError("%v", err)
	}
	return log, 0
}
