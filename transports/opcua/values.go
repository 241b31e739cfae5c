package opcua

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gopcua/opcua/ua"
)

// The number handling below mirrors the Modbus and S7 transports: a write
// arrives as a bool, a Go number, a json.Number or a decimal string and is
// converted exactly, or refused, into the node's data type.

// variantFor converts a written value (after inverting scale and offset)
// into a variant of the node's type.
func variantFor(t *tag, kind ua.TypeID, v any) (*ua.Variant, error) {
	if kind == ua.TypeIDString {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a String node takes a string, got %T", ErrValue, v)
		}
		return ua.NewVariant(s)
	}
	if kind == ua.TypeIDBoolean {
		b, err := boolOf(v)
		if err != nil {
			return nil, err
		}
		return ua.NewVariant(b)
	}
	n, err := toNumber(v)
	if err != nil {
		return nil, err
	}
	n = unscale(t, n)
	var out any
	switch kind {
	case ua.TypeIDFloat:
		f := n.float()
		if math.Abs(f) > math.MaxFloat32 && !math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %v out of Float range", ErrValue, f)
		}
		out = float32(f)
	case ua.TypeIDDouble:
		out = n.float()
	case ua.TypeIDSByte, ua.TypeIDInt16, ua.TypeIDInt32, ua.TypeIDInt64:
		bits := map[ua.TypeID]uint{ua.TypeIDSByte: 8, ua.TypeIDInt16: 16, ua.TypeIDInt32: 32, ua.TypeIDInt64: 64}[kind]
		u, err := integer(n, true, bits)
		if err != nil {
			return nil, err
		}
		switch kind {
		case ua.TypeIDSByte:
			out = int8(u)
		case ua.TypeIDInt16:
			out = int16(u)
		case ua.TypeIDInt32:
			out = int32(u)
		default:
			out = int64(u)
		}
	case ua.TypeIDByte, ua.TypeIDUint16, ua.TypeIDUint32, ua.TypeIDUint64:
		bits := map[ua.TypeID]uint{ua.TypeIDByte: 8, ua.TypeIDUint16: 16, ua.TypeIDUint32: 32, ua.TypeIDUint64: 64}[kind]
		u, err := integer(n, false, bits)
		if err != nil {
			return nil, err
		}
		switch kind {
		case ua.TypeIDByte:
			out = uint8(u)
		case ua.TypeIDUint16:
			out = uint16(u)
		case ua.TypeIDUint32:
			out = uint32(u)
		default:
			out = u
		}
	default:
		return nil, fmt.Errorf("%w: writing a %s node is not supported", ErrValue, kind)
	}
	return ua.NewVariant(out)
}

// typeIDs maps configured types to OPC UA built-in types.
var typeIDs = map[string]ua.TypeID{
	"bool": ua.TypeIDBoolean, "int8": ua.TypeIDSByte, "uint8": ua.TypeIDByte,
	"int16": ua.TypeIDInt16, "uint16": ua.TypeIDUint16, "int32": ua.TypeIDInt32,
	"uint32": ua.TypeIDUint32, "int64": ua.TypeIDInt64, "uint64": ua.TypeIDUint64,
	"float32": ua.TypeIDFloat, "float64": ua.TypeIDDouble, "string": ua.TypeIDString,
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
