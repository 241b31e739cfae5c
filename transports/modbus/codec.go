package modbus

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
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

// applyScale turns a raw number into its engineering value. Without scale
// and offset the raw Go type is kept so integers stay exact.
func applyScale(t *tag, v any) any {
	if t.scale == nil && t.offset == 0 {
		return v
	}
	f, ok := toFloat(v)
	if !ok {
		return v
	}
	s := 1.0
	if t.scale != nil {
		s = *t.scale
	}
	return f*s + t.offset
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int16:
		return float64(x), true
	case uint16:
		return float64(x), true
	case int32:
		return float64(x), true
	case uint32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// number is a written value reduced to what an encoder needs: an exact
// integer when the input was one, else a float.
type number struct {
	isInt   bool
	neg     bool   // for isInt: the value is negative
	u       uint64 // for isInt: the magnitude
	f       float64
	boolean bool // the value came from a bool
}

func (n number) float() float64 {
	if !n.isInt {
		return n.f
	}
	if n.neg {
		return -float64(n.u)
	}
	return float64(n.u)
}

// toNumber accepts the forms a write request may carry: Go numbers, bools,
// json.Number and decimal strings.
func toNumber(v any) (number, error) {
	switch x := v.(type) {
	case bool:
		if x {
			return number{isInt: true, u: 1, boolean: true}, nil
		}
		return number{isInt: true, boolean: true}, nil
	case int:
		return signed(int64(x)), nil
	case int8:
		return signed(int64(x)), nil
	case int16:
		return signed(int64(x)), nil
	case int32:
		return signed(int64(x)), nil
	case int64:
		return signed(x), nil
	case uint:
		return number{isInt: true, u: uint64(x)}, nil
	case uint8:
		return number{isInt: true, u: uint64(x)}, nil
	case uint16:
		return number{isInt: true, u: uint64(x)}, nil
	case uint32:
		return number{isInt: true, u: uint64(x)}, nil
	case uint64:
		return number{isInt: true, u: x}, nil
	case float32:
		return number{f: float64(x)}, nil
	case float64:
		return number{f: x}, nil
	case json.Number:
		return parseNumber(string(x))
	case string:
		return parseNumber(x)
	}
	return number{}, fmt.Errorf("%w: %T is not a number", ErrValue, v)
}

func signed(i int64) number {
	if i < 0 {
		return number{isInt: true, neg: true, u: uint64(-(i + 1)) + 1}
	}
	return number{isInt: true, u: uint64(i)}
}

func parseNumber(s string) (number, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "true":
		return number{isInt: true, u: 1, boolean: true}, nil
	case "false":
		return number{isInt: true, boolean: true}, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return signed(i), nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return number{isInt: true, u: u}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return number{}, fmt.Errorf("%w: %q is not a number", ErrValue, s)
	}
	return number{f: f}, nil
}

// unscale inverts scale and offset for a write.
func unscale(t *tag, n number) number {
	if t.scale == nil && t.offset == 0 {
		return n
	}
	s := 1.0
	if t.scale != nil {
		s = *t.scale
	}
	return number{f: (n.float() - t.offset) / s}
}

// integer returns n as an integer within [lo, hi] (as signed bounds when
// signed) or an error naming the range; floats must be whole after
// rounding to the nearest integer, as a scaled write produces them.
func integer(n number, signedType bool, bits uint) (uint64, error) {
	if !n.isInt {
		if math.IsNaN(n.f) || math.IsInf(n.f, 0) {
			return 0, fmt.Errorf("%w: %v does not fit an integer", ErrValue, n.f)
		}
		r := math.Round(n.f)
		if r < 0 {
			if r < -math.Ldexp(1, 63) {
				return 0, fmt.Errorf("%w: %v out of range", ErrValue, n.f)
			}
			n = signed(int64(r))
		} else {
			if r >= math.Ldexp(1, 64) {
				return 0, fmt.Errorf("%w: %v out of range", ErrValue, n.f)
			}
			n = number{isInt: true, u: uint64(r)}
		}
	}
	if signedType {
		limit := uint64(1) << (bits - 1) // |min|; max is limit-1
		if n.neg {
			if n.u > limit {
				return 0, fmt.Errorf("%w: -%d below the int%d minimum", ErrValue, n.u, bits)
			}
			return -n.u & mask(bits), nil
		}
		if n.u > limit-1 {
			return 0, fmt.Errorf("%w: %d above the int%d maximum", ErrValue, n.u, bits)
		}
		return n.u, nil
	}
	if n.neg {
		return 0, fmt.Errorf("%w: -%d below the uint%d minimum 0", ErrValue, n.u, bits)
	}
	if bits < 64 && n.u > mask(bits) {
		return 0, fmt.Errorf("%w: %d above the uint%d maximum", ErrValue, n.u, bits)
	}
	return n.u, nil
}

func mask(bits uint) uint64 {
	if bits >= 64 {
		return math.MaxUint64
	}
	return 1<<bits - 1
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
	n, err := toNumber(v)
	if err != nil {
		return nil, err
	}
	n = unscale(t, n)
	var big []byte
	switch t.typ {
	case typeFloat32:
		f := n.float()
		if math.Abs(f) > math.MaxFloat32 && !math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %v out of float32 range", ErrValue, f)
		}
		big = binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(f)))
	case typeFloat64:
		big = binary.BigEndian.AppendUint64(nil, math.Float64bits(n.float()))
	default:
		bits := uint(16 * t.typ.registers(0))
		signedType := t.typ == typeInt16 || t.typ == typeInt32 || t.typ == typeInt64
		u, err := integer(n, signedType, bits)
		if err != nil {
			return nil, err
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

// boolOf reads a written value as a bool: bools, 0/1 numbers and
// "true"/"false" strings.
func boolOf(v any) (bool, error) {
	n, err := toNumber(v)
	if err != nil {
		return false, err
	}
	if n.isInt && !n.neg && n.u <= 1 {
		return n.u == 1, nil
	}
	if !n.isInt && (n.f == 0 || n.f == 1) {
		return n.f == 1, nil
	}
	return false, fmt.Errorf("%w: %v is not a bool (want true, false, 0 or 1)", ErrValue, v)
}
