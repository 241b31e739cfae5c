package modbus

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// ByteOrder names how the bytes of a multi-register value appear on the
// wire, with A the most significant byte of a 32-bit value. Devices
// disagree on this, which is why it is configurable per device and per tag.
type ByteOrder string

// The four orders in use by Modbus devices.
const (
	ABCD ByteOrder = "ABCD" // big-endian, the Modbus specification's order
	DCBA ByteOrder = "DCBA" // little-endian
	BADC ByteOrder = "BADC" // big-endian words with their bytes swapped
	CDAB ByteOrder = "CDAB" // little-endian word order, big-endian bytes
)

func parseOrder(s string) (ByteOrder, bool) {
	switch o := ByteOrder(strings.ToUpper(strings.TrimSpace(s))); o {
	case ABCD, DCBA, BADC, CDAB:
		return o, true
	}
	return "", false
}

// toBig rearranges wire bytes (registers as sent, each big-endian) into
// big-endian value bytes. Every order is its own inverse, so the same
// function also turns value bytes into wire bytes.
func (o ByteOrder) toBig(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	switch o {
	case DCBA:
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case BADC:
		for i := 0; i+1 < len(out); i += 2 {
			out[i], out[i+1] = out[i+1], out[i]
		}
	case CDAB:
		n := len(out) / 2
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			out[2*i], out[2*j] = out[2*j], out[2*i]
			out[2*i+1], out[2*j+1] = out[2*j+1], out[2*i+1]
		}
	}
	return out
}

// swapsBytes reports whether the order swaps the two bytes of a register,
// which is all that matters for 16-bit values and strings.
func (o ByteOrder) swapsBytes() bool { return o == DCBA || o == BADC }

// dataType is a tag's value type.
type dataType string

const (
	typeBool    dataType = "bool"
	typeInt16   dataType = "int16"
	typeUint16  dataType = "uint16"
	typeInt32   dataType = "int32"
	typeUint32  dataType = "uint32"
	typeInt64   dataType = "int64"
	typeUint64  dataType = "uint64"
	typeFloat32 dataType = "float32"
	typeFloat64 dataType = "float64"
	typeString  dataType = "string"
)

// registers is how many 16-bit registers a value of the type occupies.
func (d dataType) registers(length int) int {
	switch d {
	case typeBool, typeInt16, typeUint16:
		return 1
	case typeInt32, typeUint32, typeFloat32:
		return 2
	case typeInt64, typeUint64, typeFloat64:
		return 4
	case typeString:
		return (length + 1) / 2
	}
	return 0
}

// decodeRegisters turns a tag's wire bytes (2 per register) into its value,
// before scale and offset.
func decodeRegisters(t *tag, wire []byte) (any, error) {
	if t.typ == typeString {
		b := wire
		if t.order.swapsBytes() {
			b = BADC.toBig(wire)
		}
		b = b[:t.length]
		// A string register area is NUL-padded by convention.
		if i := strings.IndexByte(string(b), 0); i >= 0 {
			b = b[:i]
		}
		return string(b), nil
	}
	if t.typ == typeBool {
		v := binary.BigEndian.Uint16(wire)
		return v&(1<<uint(t.bit)) != 0, nil
	}
	var b []byte
	if len(wire) == 2 {
		b = wire
		if t.order.swapsBytes() {
			b = []byte{wire[1], wire[0]}
		}
	} else {
		b = t.order.toBig(wire)
	}
	switch t.typ {
	case typeInt16:
		return int16(binary.BigEndian.Uint16(b)), nil
	case typeUint16:
		return binary.BigEndian.Uint16(b), nil
	case typeInt32:
		return int32(binary.BigEndian.Uint32(b)), nil
	case typeUint32:
		return binary.BigEndian.Uint32(b), nil
	case typeFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(b)), nil
	case typeInt64:
		return int64(binary.BigEndian.Uint64(b)), nil
	case typeUint64:
		return binary.BigEndian.Uint64(b), nil
	case typeFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	}
	return nil, fmt.Errorf("%w %q", ErrType, t.typ)
}

// encodeRegisters turns a written value into the tag's wire bytes. Bool
// tags (bits in registers) are handled by the caller, which must read the
// register first.
func encodeRegisters(t *tag, v any) ([]byte, error) {
	if t.typ == typeString {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a string tag takes a string, got %T", ErrValue, v)
		}
		if len(s) > t.length {
			return nil, fmt.Errorf("%w: %d bytes do not fit the tag's length %d", ErrValue, len(s), t.length)
		}
		b := make([]byte, 2*t.typ.registers(t.length))
		copy(b, s)
		if t.order.swapsBytes() {
			b = BADC.toBig(b)
		}
		return b, nil
	}
	n, err := tagvalue.ToNumber(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValue, err)
	}
	n = tagvalue.Unscale(n, t.scale, t.offset)
	var big []byte
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
			big = binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(f)))
		} else {
			big = binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
		}
	default:
		bits := uint(16 * t.typ.registers(0))
		signedType := t.typ == typeInt16 || t.typ == typeInt32 || t.typ == typeInt64
		u, err := tagvalue.Integer(n, signedType, bits)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		big = make([]byte, bits/8)
		for i := range big {
			big[len(big)-1-i] = byte(u >> (8 * uint(i)))
		}
	}
	if len(big) == 2 {
		if t.order.swapsBytes() {
			big[0], big[1] = big[1], big[0]
		}
		return big, nil
	}
	return t.order.toBig(big), nil
}
