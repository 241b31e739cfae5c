// Package tagvalue converts the values of device tags, for the Modbus, S7
// and OPC UA transports alike: a raw reading into its engineering value
// (scale and offset), and a written value (a bool, any Go number, a
// json.Number or a decimal string) back into an exact integer or float of
// the tag's type, or a refusal that names the value and the limit.
//
// Its errors match ErrValue (errors.Is) but their text does not repeat it:
// a transport wraps them in its own sentinel, e.g.
// fmt.Errorf("%w: %w", modbus.ErrValue, err) reads "modbus: invalid value:
// 70000 above the uint16 maximum".
package tagvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrValue matches every error of this package: a written value that is
// not a number or a bool, or does not fit the requested type.
var ErrValue = errors.New("tagvalue: invalid value")

// valueError is an error of this package; its text is only the reason, so
// that the transport's sentinel can lead it.
type valueError struct{ msg string }

func (e *valueError) Error() string        { return e.msg }
func (e *valueError) Is(target error) bool { return target == ErrValue }

func errorf(format string, args ...any) error {
	return &valueError{msg: fmt.Sprintf(format, args...)}
}

// Scale turns a raw reading into its engineering value, v*scale + offset
// as a float64 (a nil scale counts as 1). Without scale and offset, and for
// a v that is not a number, v is returned unchanged, so integers stay
// exact.
func Scale(v any, scale *float64, offset float64) any {
	if scale == nil && offset == 0 {
		return v
	}
	f, ok := ToFloat(v)
	if !ok {
		return v
	}
	s := 1.0
	if scale != nil {
		s = *scale
	}
	return f*s + offset
}

// ToFloat returns a Go number (any int, uint or float type but uintptr) as
// a float64; ok is false for anything else.
func ToFloat(v any) (f float64, ok bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
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

// Number is a written value reduced to what an encoder needs: an exact
// integer when the input was one, else a float. The zero Number is the
// integer 0.
type Number struct {
	isInt bool
	neg   bool   // for isInt: the value is negative
	u     uint64 // for isInt: the magnitude
	f     float64
}

// Float returns n as a float64 (rounded if it is an integer beyond 2^53).
func (n Number) Float() float64 {
	if !n.isInt {
		return n.f
	}
	if n.neg {
		return -float64(n.u)
	}
	return float64(n.u)
}

// ToNumber accepts the forms a write request may carry: bools (1 and 0),
// Go numbers, json.Number and decimal strings (also "true" and "false").
// Integers, and strings that parse as a 64-bit integer, stay exact.
func ToNumber(v any) (Number, error) {
	switch x := v.(type) {
	case bool:
		if x {
			return Number{isInt: true, u: 1}, nil
		}
		return Number{isInt: true}, nil
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
		return Number{isInt: true, u: uint64(x)}, nil
	case uint8:
		return Number{isInt: true, u: uint64(x)}, nil
	case uint16:
		return Number{isInt: true, u: uint64(x)}, nil
	case uint32:
		return Number{isInt: true, u: uint64(x)}, nil
	case uint64:
		return Number{isInt: true, u: x}, nil
	case float32:
		return Number{f: float64(x)}, nil
	case float64:
		return Number{f: x}, nil
	case json.Number:
		return parse(string(x))
	case string:
		return parse(x)
	}
	return Number{}, errorf("%T is not a number", v)
}

func signed(i int64) Number {
	if i < 0 {
		return Number{isInt: true, neg: true, u: uint64(-(i + 1)) + 1}
	}
	return Number{isInt: true, u: uint64(i)}
}

func parse(s string) (Number, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "true":
		return Number{isInt: true, u: 1}, nil
	case "false":
		return Number{isInt: true}, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return signed(i), nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return Number{isInt: true, u: u}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Number{}, errorf("%q is not a number", s)
	}
	return Number{f: f}, nil
}

// Unscale inverts Scale for a write: (n - offset) / scale as a float (a
// nil scale counts as 1). Without scale and offset n is returned
// unchanged, so integers stay exact.
func Unscale(n Number, scale *float64, offset float64) Number {
	if scale == nil && offset == 0 {
		return n
	}
	s := 1.0
	if scale != nil {
		s = *scale
	}
	return Number{f: (n.Float() - offset) / s}
}

// Integer returns n as an integer of the given width (8 to 64 bits),
// signed or not, in two's complement in the low bits of the result; a
// value out of the type's range is refused with an error naming the value
// and the limit. A float is rounded to the nearest integer first, as a
// scaled write produces them; NaN and infinities are refused.
func Integer(n Number, signedType bool, bits uint) (uint64, error) {
	if !n.isInt {
		if math.IsNaN(n.f) || math.IsInf(n.f, 0) {
			return 0, errorf("%v does not fit an integer", n.f)
		}
		r := math.Round(n.f)
		if r < 0 {
			if r < -math.Ldexp(1, 63) {
				return 0, errorf("%v out of range", n.f)
			}
			n = signed(int64(r))
		} else {
			if r >= math.Ldexp(1, 64) {
				return 0, errorf("%v out of range", n.f)
			}
			n = Number{isInt: true, u: uint64(r)}
		}
	}
	if signedType {
		limit := uint64(1) << (bits - 1) // |min|; max is limit-1
		if n.neg {
			if n.u > limit {
				return 0, errorf("-%d below the int%d minimum", n.u, bits)
			}
			return -n.u & mask(bits), nil
		}
		if n.u > limit-1 {
			return 0, errorf("%d above the int%d maximum", n.u, bits)
		}
		return n.u, nil
	}
	if n.neg {
		return 0, errorf("-%d below the uint%d minimum 0", n.u, bits)
	}
	if bits < 64 && n.u > mask(bits) {
		return 0, errorf("%d above the uint%d maximum", n.u, bits)
	}
	return n.u, nil
}

func mask(bits uint) uint64 {
	if bits >= 64 {
		return math.MaxUint64
	}
	return 1<<bits - 1
}

// Bool reads a written value as a bool: bools, the numbers 0 and 1 (in
// any form ToNumber accepts) and "true"/"false" strings.
func Bool(v any) (bool, error) {
	n, err := ToNumber(v)
	if err != nil {
		return false, err
	}
	if n.isInt && !n.neg && n.u <= 1 {
		return n.u == 1, nil
	}
	if !n.isInt && (n.f == 0 || n.f == 1) {
		return n.f == 1, nil
	}
	return false, errorf("%v is not a bool (want true, false, 0 or 1)", v)
}
