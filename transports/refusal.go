package transports

import "errors"

// Refusals of a write that a device transport makes before anything is
// sent to the device. Each device package's own sentinel (modbus:
// unknown tag, ...) matches one of them with errors.Is, so the write
// protocol can answer each with its own reply code without importing
// every device package.
var (
	// ErrUnknownTag: the device defines no tag of that name.
	ErrUnknownTag = errors.New("transports: unknown tag")
	// ErrReadOnly: the tag is not marked writable.
	ErrReadOnly = errors.New("transports: tag not writable")
	// ErrBadValue: the value does not convert exactly to the tag's type.
	ErrBadValue = errors.New("transports: value does not fit the tag")
)

// Sentinel returns an error reading text that also matches kind (one of
// the refusals above) with errors.Is.
func Sentinel(text string, kind error) error { return &sentinel{text: text, kind: kind} }

type sentinel struct {
	text string
	kind error
}

func (s *sentinel) Error() string        { return s.text }
func (s *sentinel) Is(target error) bool { return target == s.kind }
