package s7

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The conversions below mirror those of the Modbus transport; S7 values
// are always big-endian.

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
	n, err := toNumber(v)
	if err != nil {
		return nil, err
	}
	n = unscale(t, n)
	switch t.typ {
	case typeFloat32:
		f := n.float()
		if math.Abs(f) > math.MaxFloat32 && !math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %v out of float32 range", ErrValue, f)
		}
		return binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(f))), nil
	case typeFloat64:
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(n.float())), nil
	}
	bits := uint(8 * t.size)
	signedType := t.typ == typeInt8 || t.typ == typeInt16 || t.typ == typeInt32 || t.typ == typeInt64
	u, err := integer(n, signedType, bits)
	if err != nil {
		return nil, err
	}
	b := make([]byte, t.size)
	for i := range b {
		b[len(b)-1-i] = byte(u >> (8 * uint(i)))
	}
	return b, nil
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
	case int8:
		return float64(x), true
	case uint8:
		return float64(x), true
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
