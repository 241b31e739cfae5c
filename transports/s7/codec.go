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
	case typeBool:
		return b[0]&(1<<uint(t.bit)) != 0
	case typeInt8:
		return int8(b[0])
	case typeUint8:
		return b[0]
	case typeInt16:
		return int16(binary.BigEndian.Uint16(b))
	case typeUint16:
		return binary.BigEndian.Uint16(b)
	case typeInt32:
		return int32(binary.BigEndian.Uint32(b))
	case typeUint32:
		return binary.BigEndian.Uint32(b)
	case typeFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(b))
	case typeInt64:
		return int64(binary.BigEndian.Uint64(b))
	case typeUint64:
		return binary.BigEndian.Uint64(b)
	case typeFloat64:
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
	if t.typ == typeString {
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
	n, err := tagvalue.ToNumber(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValue, err)
	}
	n = tagvalue.Unscale(n, t.scale, t.offset)
	switch t.typ {
	case typeFloat32, typeFloat64:
		bits := uint(32)
		if t.typ == typeFloat64 {
			bits = 64
		}
		f, err := tagvalue.Float(n, bits)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		if bits == 32 {
			return binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(f))), nil
		}
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)), nil
	}
	bits := uint(8 * t.size)
	signedType := t.typ == typeInt8 || t.typ == typeInt16 || t.typ == typeInt32 || t.typ == typeInt64
	u, err := tagvalue.Integer(n, signedType, bits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValue, err)
	}
	b := make([]byte, t.size)
	for i := range b {
		b[len(b)-1-i] = byte(u >> (8 * uint(i)))
	}
	return b, nil
}
