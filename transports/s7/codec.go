package s7

import (
	"fmt"

	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// S7 values are always big-endian; package tagvalue converts numbers.

// decode turns a tag's bytes into its value, before scale and offset.
func decode(t *tag, b []byte) any {
	if t.typ == tagvalue.TypeBool {
		return b[0]&(1<<uint(t.bit)) != 0
	}
	if v, ok := tagvalue.FromBigEndian(t.typ, b); ok {
		return v
	}
	// An S7 STRING: declared length, current length, characters. A
	// current length beyond the declared one is clipped, as a PLC does.
	n := min(int(b[1]), t.strMax, len(b)-2)
	return string(b[2 : 2+n])
}

// encode turns a written value into the tag's bytes; bools are written
// as single bits by the caller.
func encode(t *tag, v any) ([]byte, error) {
	if t.typ == tagvalue.TypeString {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a string tag takes a string, got %T", ErrValue, v)
		}
		if len(s) > t.strMax {
			return nil, fmt.Errorf("%w: %d bytes do not fit the STRING[%d]", ErrValue, len(s), t.strMax)
		}
		b := make([]byte, t.size)
		b[0], b[1] = byte(t.strMax), byte(len(s))
		copy(b[2:], s)
		return b, nil
	}
	b, err := tagvalue.BigEndian(v, t.typ, t.scale, t.offset)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValue, err)
	}
	return b, nil
}
