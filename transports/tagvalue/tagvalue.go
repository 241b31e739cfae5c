// Package tagvalue converts the values of device tags, for the Modbus, S7
// and OPC UA transports alike: a raw reading into its engineering value
// (scale and offset), and a written value (a bool, any Go number, a
// json.Number or a decimal string) back into an exact integer or float of
// the tag's type, or a refusal that names the value and the limit.
//
// Written values are exact decimals (math/big rationals): a number is
// taken as the decimal it is written as (a float64 as its shortest decimal
// form, 0.1 as one tenth), scale and offset likewise, so (value - offset) /
// scale is computed without rounding. An integer tag takes only a result
// that is an integer: 1.5 is refused, never rounded. docs/writes.md states
// these rules for requesters.
//
// Its errors match ErrValue (errors.Is) but their text does not repeat it:
// a transport wraps them in its own sentinel, e.g.
// fmt.Errorf("%w: %w", modbus.ErrValue, err) reads "modbus: invalid value:
// 70000 above the uint16 maximum".
package tagvalue

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Type is a tag's value type as the configuration names it; routes.TagTypes
// is the list of them, and each device transport's TestEveryTagType holds
// its codec to that list.
type Type string

// The tag types.
const (
	TypeBool    Type = "bool"
	TypeInt8    Type = "int8"
	TypeUint8   Type = "uint8"
	TypeInt16   Type = "int16"
	TypeUint16  Type = "uint16"
	TypeInt32   Type = "int32"
	TypeUint32  Type = "uint32"
	TypeInt64   Type = "int64"
	TypeUint64  Type = "uint64"
	TypeFloat32 Type = "float32"
	TypeFloat64 Type = "float64"
	TypeString  Type = "string"
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

// MaxNumberLen bounds the text of a written number (a JSON number or a
// decimal string), and MaxExponent the magnitude of its exponent, so that
// exact arithmetic on a hostile value stays small.
const (
	MaxNumberLen = 64
	MaxExponent  = 400
)

// Number is a written value as an exact decimal. The zero Number is 0.
type Number struct {
	r *big.Rat
}

func (n Number) rat() *big.Rat {
	if n.r == nil {
		return new(big.Rat)
	}
	return n.r
}

// IsInt reports whether n is an integer.
func (n Number) IsInt() bool { return n.rat().IsInt() }

// Float returns n as the nearest float64 (±Inf beyond its range).
func (n Number) Float() float64 {
	f, _ := n.rat().Float64()
	return f
}

// String renders n in at most a few dozen characters: integers of up to
// 24 digits exactly, other values as the shortest decimal of the nearest
// float64, or with 6 significant digits beyond its range.
func (n Number) String() string {
	r := n.rat()
	if r.IsInt() && len(r.Num().String()) <= 24 {
		return r.Num().String()
	}
	if f := n.Float(); !math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return new(big.Float).SetRat(r).Text('g', 6)
}

// Equal reports whether n and m are the same number.
func (n Number) Equal(m Number) bool { return n.rat().Cmp(m.rat()) == 0 }

// ToNumber accepts the forms a write request may carry: bools (1 and 0),
// Go numbers, json.Number and decimal strings (also "true" and "false").
// Integers stay exact; a float is taken as its shortest decimal form; a
// decimal text is taken exactly as written.
func ToNumber(v any) (Number, error) {
	switch x := v.(type) {
	case bool:
		if x {
			return Number{r: big.NewRat(1, 1)}, nil
		}
		return Number{r: new(big.Rat)}, nil
	case int:
		return Number{r: new(big.Rat).SetInt64(int64(x))}, nil
	case int8:
		return Number{r: new(big.Rat).SetInt64(int64(x))}, nil
	case int16:
		return Number{r: new(big.Rat).SetInt64(int64(x))}, nil
	case int32:
		return Number{r: new(big.Rat).SetInt64(int64(x))}, nil
	case int64:
		return Number{r: new(big.Rat).SetInt64(x)}, nil
	case uint:
		return Number{r: new(big.Rat).SetUint64(uint64(x))}, nil
	case uint8:
		return Number{r: new(big.Rat).SetUint64(uint64(x))}, nil
	case uint16:
		return Number{r: new(big.Rat).SetUint64(uint64(x))}, nil
	case uint32:
		return Number{r: new(big.Rat).SetUint64(uint64(x))}, nil
	case uint64:
		return Number{r: new(big.Rat).SetUint64(x)}, nil
	case float32:
		return fromFloat(float64(x), 32)
	case float64:
		return fromFloat(x, 64)
	case json.Number:
		return parse(string(x))
	case string:
		return parse(x)
	}
	return Number{}, errorf("%T is not a number", v)
}

// fromFloat takes f as its shortest decimal form at its precision.
func fromFloat(f float64, bits int) (Number, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Number{}, errorf("%v is not a finite number", f)
	}
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, bits))
	return Number{r: r}, nil
}

// decimal returns f (a configured scale or offset) as its shortest
// decimal form.
func decimal(f float64) *big.Rat {
	n, err := fromFloat(f, 64)
	if err != nil {
		return new(big.Rat) // validation refuses non-finite settings
	}
	return n.r
}

func parse(s string) (Number, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "true":
		return Number{r: big.NewRat(1, 1)}, nil
	case "false":
		return Number{r: new(big.Rat)}, nil
	}
	if len(s) > MaxNumberLen {
		return Number{}, errorf("a number of %d characters (at most %d)", len(s), MaxNumberLen)
	}
	if !isDecimal(s) {
		return Number{}, errorf("%q is not a number", s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return Number{}, errorf("%q is not a number", s)
	}
	return Number{r: r}, nil
}

// isDecimal accepts [+-]digits[.digits][(e|E)[+-]digits] with at least one
// mantissa digit and an exponent of at most MaxExponent: no fractions, hex
// or infinities, which big.Rat and strconv would also read.
func isDecimal(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i == len(s) {
		return true
	}
	if s[i] != 'e' && s[i] != 'E' {
		return false
	}
	exp, err := strconv.Atoi(s[i+1:])
	return err == nil && exp >= -MaxExponent && exp <= MaxExponent
}

// Unscale inverts Scale for a write, exactly: (n - offset) / scale with
// scale and offset taken as their shortest decimal forms (a nil scale
// counts as 1).
func Unscale(n Number, scale *float64, offset float64) Number {
	if scale == nil && offset == 0 {
		return n
	}
	r := new(big.Rat).Sub(n.rat(), decimal(offset))
	if scale != nil && *scale != 0 {
		r.Quo(r, decimal(*scale))
	}
	return Number{r: r}
}

// Integer returns n as an integer of the given width (8 to 64 bits),
// signed or not, in two's complement in the low bits of the result. A
// value that is not an integer is refused, never rounded; so is a value
// out of the type's range; the error names the value and the limit.
func Integer(n Number, signedType bool, bits uint) (uint64, error) {
	r := n.rat()
	typ := fmt.Sprintf("uint%d", bits)
	if signedType {
		typ = fmt.Sprintf("int%d", bits)
	}
	if !r.IsInt() {
		return 0, errorf("%s is not an integer (the tag is %s; values are never rounded)", n, typ)
	}
	i := r.Num()
	lo, hi := new(big.Int), new(big.Int).SetUint64(mask(bits))
	if signedType {
		hi.Rsh(hi, 1)
		lo.Neg(hi).Sub(lo, big.NewInt(1))
	}
	if i.Cmp(lo) < 0 {
		if signedType {
			return 0, errorf("%s below the %s minimum", n, typ)
		}
		return 0, errorf("%s below the %s minimum 0", n, typ)
	}
	if i.Cmp(hi) > 0 {
		return 0, errorf("%s above the %s maximum", n, typ)
	}
	if i.Sign() < 0 {
		return uint64(i.Int64()) & mask(bits), nil
	}
	return i.Uint64(), nil
}

// Float returns n as a float of the given width (32 or 64): the nearest
// one, as every decimal fraction must be. A value beyond the type's range,
// or one that is not zero but would become zero, is refused.
func Float(n Number, bits uint) (float64, error) {
	r := n.rat()
	var f float64
	if bits == 32 {
		f32, _ := r.Float32()
		f = float64(f32)
	} else {
		f, _ = r.Float64()
	}
	switch {
	case math.IsInf(f, 0):
		return 0, errorf("%s out of the float%d range", n, bits)
	case f == 0 && r.Sign() != 0:
		return 0, errorf("%s is too small for float%d: it is not zero but would become zero", strings.TrimSpace(r.FloatString(3)), bits)
	}
	return f, nil
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
	switch r := n.rat(); {
	case r.Sign() == 0:
		return false, nil
	case r.Cmp(big.NewRat(1, 1)) == 0:
		return true, nil
	}
	return false, errorf("%v is not a bool (want true, false, 0 or 1)", v)
}

// BigEndian converts a written value to the big-endian bytes of a numeric
// tag type (int8 … uint64, float32, float64, as the configuration names
// them), inverting scale and offset first: the wire form Modbus registers
// and S7 memory share before Modbus applies its byte order.
func BigEndian(v any, typ Type, scale *float64, offset float64) ([]byte, error) {
	n, err := ToNumber(v)
	if err != nil {
		return nil, err
	}
	n = Unscale(n, scale, offset)
	switch typ {
	case TypeFloat32, TypeFloat64:
		bits := uint(32)
		if typ == TypeFloat64 {
			bits = 64
		}
		f, err := Float(n, bits)
		if err != nil {
			return nil, err
		}
		if bits == 32 {
			return binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(f))), nil
		}
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)), nil
	}
	bits, err := intBits(typ)
	if err != nil {
		return nil, err
	}
	u, err := Integer(n, strings.HasPrefix(string(typ), "int"), bits)
	if err != nil {
		return nil, err
	}
	b := make([]byte, bits/8)
	for i := range b {
		b[len(b)-1-i] = byte(u >> (8 * uint(i)))
	}
	return b, nil
}

// FromBigEndian is BigEndian's inverse before scale and offset: the value
// of a numeric tag type from its big-endian bytes, false for a type that
// is not a number. b holds at least the type's width.
func FromBigEndian(typ Type, b []byte) (any, bool) {
	switch typ {
	case TypeInt8:
		return int8(b[0]), true
	case TypeUint8:
		return b[0], true
	case TypeInt16:
		return int16(binary.BigEndian.Uint16(b)), true
	case TypeUint16:
		return binary.BigEndian.Uint16(b), true
	case TypeInt32:
		return int32(binary.BigEndian.Uint32(b)), true
	case TypeUint32:
		return binary.BigEndian.Uint32(b), true
	case TypeFloat32:
		return math.Float32frombits(binary.BigEndian.Uint32(b)), true
	case TypeInt64:
		return int64(binary.BigEndian.Uint64(b)), true
	case TypeUint64:
		return binary.BigEndian.Uint64(b), true
	case TypeFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(b)), true
	}
	return nil, false
}

// intBits is the width of an integer tag type.
func intBits(typ Type) (uint, error) {
	bits, err := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(string(typ), "u"), "int"))
	if err != nil || !strings.Contains(string(typ), "int") || (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
		return 0, errorf("type %q is not a number type", typ)
	}
	return uint(bits), nil
}
