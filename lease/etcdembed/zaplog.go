package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogCore is a zap core that writes etcd's warnings and errors to our
// slog logger, so they reach the bridge's log in its format.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
	// quiet is set while the member closes: its listeners then report
	// errors that only mean "closed".
	quiet *atomic.Bool
}

// benign are etcd messages at warning or error level that every start of a
// healthy single member logs; they go to debug so that a warning in the
// bridge's log means something.
var benign = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
	"Failed to detect schema version":                                                      true,
	"failed to update storage version":                                                     true,
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(f []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), f...), quiet: c.quiet}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]any, 0, 2+2*len(keys))
	attrs = append(attrs, "component", "embedded-etcd")
	for _, k := range keys {
		attrs = append(attrs, k, enc.Fields[k])
	}
	level := slog.LevelWarn
	switch {
	case benign[e.Message] || (c.quiet.Load() && e.Level < zapcore.DPanicLevel):
		level = slog.LevelDebug
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	}
	c.log.Log(context.Background(), level, "embedded lease store: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// fatalHook replaces zap's exit (Fatal) and panic (Panic, DPanic) for
// etcd's logger: it hands the error, classified, to onFatal, which ends the
// process with our exit status and without a stack trace.
type fatalHook struct {
	dir     string
	onFatal func(error)
}

func (h fatalHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	err := errors.New(ce.Message)
	for _, f := range fields {
		if fe, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
			err = fmt.Errorf("%s: %w", ce.Message, fe)
			break
		}
	}
	h.onFatal(Classify(err, h.dir))
	// onFatal must not return; if it does, stop this goroutine rather than
	// let etcd run on after an unrecoverable error.
	select {}
}

// newZapLogger is etcd's logger: warnings and errors to log (nothing when
// log is nil), and fatal errors and panics to onFatal when it is set.
func newZapLogger(log *slog.Logger, dir string, onFatal func(error), quiet *atomic.Bool) *zap.Logger {
	var core zapcore.Core = zapcore.NewNopCore()
	if log != nil {
		core = &slogCore{log: log, quiet: quiet}
	}
	if onFatal == nil {
		return zap.New(core)
	}
	h := fatalHook{dir: dir, onFatal: onFatal}
	return zap.New(core, zap.WithFatalHook(h), zap.WithPanicHook(h))
}

// Classify wraps err with ErrDiskFull, naming dir, when the disk is full:
// etcd reports ENOSPC both as a wrapped error and, from some paths, only
// as text.
func Classify(err error, dir string) error {
	if err == nil || errors.Is(err, ErrDiskFull) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
		return fmt.Errorf("%w: %s: %w", ErrDiskFull, dir, err)
	}
	return err
}
