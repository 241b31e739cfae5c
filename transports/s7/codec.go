package s7

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// S7 values are always big-endian; package tagvalue converts numbers.

// decode turns a tag's bytes into its value, before scale and offset.
func decode(t *tag, b []byte) any {
	switch t.typ {
	case tagvalue.TypeBool:
		return b[0]&(1<<uint(t.bit)) != 0
	case tagvalue.TypeInt8:
		return int8(b[0])
	case tagvalue.TypeUint8:
		return b[0]
	case tagvalue.TypeInt16:
		return int16(binary.BigEndian.Uint16(b))
	case tagvalue.TypeUint16:
		return binary.BigEndian.Uint16(b)
	case tagvalue.TypeInt32:
		return int32(binary.BigEndian.Uint32(b))
	case tagvalue.TypeUint32:
		return binary.BigEndian.Uint32(b)
	case tagvalue.TypeFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(b))
	case tagvalue.TypeInt64:
		return int64(binary.BigEndian.Uint64(b))
	case tagvalue.TypeUint64:
		return binary.BigEndian.Uint64(b)
	case tagvalue.TypeFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(b))
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
