package modbus

import (
	"encoding/binary"
	"fmt"
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

// parseOrder reads a byte_order as written; the configuration and the
// transport accept the same four.
func parseOrder(s string) (ByteOrder, bool) {
	switch o := ByteOrder(s); o {
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

// registers is how many 16-bit registers a value of the type occupies.
func registers(d tagvalue.Type, length int) int {
	switch d {
	case tagvalue.TypeBool, tagvalue.TypeInt16, tagvalue.TypeUint16:
		return 1
	case tagvalue.TypeInt32, tagvalue.TypeUint32, tagvalue.TypeFloat32:
		return 2
	case tagvalue.TypeInt64, tagvalue.TypeUint64, tagvalue.TypeFloat64:
		return 4
	case tagvalue.TypeString:
		return (length + 1) / 2
	}
	return 0
}

// decodeRegisters turns a tag's wire bytes (2 per register) into its value,
// before scale and offset.
func decodeRegisters(t *tag, wire []byte) (any, error) {
	if t.typ == tagvalue.TypeString {
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
	if t.typ == tagvalue.TypeBool {
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
	if v, ok := tagvalue.FromBigEndian(t.typ, b); ok {
		return v, nil
	}
	return nil, fmt.Errorf("%w %q", ErrType, t.typ)
}

// encodeRegisters turns a written value into the tag's wire bytes. Bool
// tags (bits in registers) are handled by the caller, which must read the
// register first.
func encodeRegisters(t *tag, v any) ([]byte, error) {
	if t.typ == tagvalue.TypeString {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a string tag takes a string, got %T", ErrValue, v)
		}
		if len(s) > t.length {
			return nil, fmt.Errorf("%w: %d bytes do not fit the tag's length %d", ErrValue, len(s), t.length)
		}
		b := make([]byte, 2*registers(t.typ, t.length))
		copy(b, s)
		if t.order.swapsBytes() {
			b = BADC.toBig(b)
		}
		return b, nil
	}
	big, err := tagvalue.BigEndian(v, t.typ, t.scale, t.offset)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValue, err)
	}
	if len(big) == 2 {
		if t.order.swapsBytes() {
			big[0], big[1] = big[1], big[0]
		}
		return big, nil
	}
	return t.order.toBig(big), nil
}
