package tagvalue

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func ptr(f float64) *float64 { return &f }

// refused checks a call's error against want, the exact text of a refusal
// matching ErrValue ("" for none), and reports whether it was refused.
func refused(t *testing.T, call string, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error %v", call, err)
	case want != "" && (err == nil || err.Error() != want || !errors.Is(err, ErrValue)):
		t.Errorf("%s: error %v, want %q matching ErrValue", call, err, want)
	}
	return err != nil || want != ""
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v      any
		scale  *float64
		offset float64
		want   any
	}{
		{"no scale keeps the type", int16(-7), nil, 0, int16(-7)},
		{"no scale keeps a uint64 exact", uint64(1<<63 + 1), nil, 0, uint64(1<<63 + 1)},
		{"scale", int16(-250), ptr(0.1), 0, -25.0},
		{"offset alone", uint16(20), nil, -273.5, -253.5},
		{"scale and offset", uint8(4), ptr(2.5), 1, 11.0},
		{"float32", float32(1.5), ptr(2), 0, 3.0},
		{"int", 3, ptr(2), 0, 6.0},
		{"a string stays", "abc", ptr(2), 1, "abc"},
		{"a bool stays", true, ptr(2), 1, true},
	} {
		if got := Scale(tc.v, tc.scale, tc.offset); got != tc.want {
			t.Errorf("%s: Scale(%#v) = %#v, want %#v", tc.name, tc.v, got, tc.want)
		}
	}
}

func TestToFloat(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want float64
		ok   bool
	}{
		{int(-3), -3, true}, {int8(-128), -128, true}, {int16(-32768), -32768, true},
		{int32(7), 7, true}, {int64(-1 << 40), -1 << 40, true},
		{uint(3), 3, true}, {uint8(255), 255, true}, {uint16(65535), 65535, true},
		{uint32(1 << 31), 1 << 31, true}, {uint64(1 << 63), 1 << 63, true},
		{float32(0.5), 0.5, true}, {2.25, 2.25, true},
		{"1", 0, false}, {true, 0, false}, {json.Number("1"), 0, false}, {nil, 0, false},
	} {
		got, ok := ToFloat(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ToFloat(%#v) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestToNumber(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string // Number.String, "" when refused
		err  string
	}{
		{true, "1", ""},
		{false, "0", ""},
		{-5, "-5", ""},
		{int64(math.MinInt64), "-9223372036854775808", ""},
		{uint64(math.MaxUint64), "18446744073709551615", ""},
		{uint8(9), "9", ""},
		{float32(1.5), "1.5", ""},
		{-2.5, "-2.5", ""},
		{json.Number("-12"), "-12", ""},
		{json.Number("1e3"), "1000", ""},
		{" 42 ", "42", ""},
		{"18446744073709551615", "18446744073709551615", ""},
		{"99999999999999999999999", "99999999999999999999999", ""},
		{"TRUE", "1", ""},
		{"false", "0", ""},
		{"0.25", "0.25", ""},
		{"x", "", `"x" is not a number`},
		{"", "", `"" is not a number`},
		{"1/2", "", `"1/2" is not a number`},
		{"0x10", "", `"0x10" is not a number`},
		{"Inf", "", `"Inf" is not a number`},
		{"NaN", "", `"NaN" is not a number`},
		{"1e", "", `"1e" is not a number`},
		{"1e401", "", `"1e401" is not a number`},
		{"1e99999999999", "", `"1e99999999999" is not a number`},
		{strings.Repeat("1", MaxNumberLen+1), "", "a number of 65 characters (at most 64)"},
		{math.NaN(), "", "NaN is not a finite number"},
		{math.Inf(1), "", "+Inf is not a finite number"},
		{[]byte("1"), "", "[]uint8 is not a number"},
		{nil, "", "<nil> is not a number"},
	} {
		got, err := ToNumber(tc.v)
		if refused(t, fmt.Sprintf("ToNumber(%#v)", tc.v), err, tc.err) {
			continue
		}
		if got.String() != tc.want {
			t.Errorf("ToNumber(%#v) = %v; want %v", tc.v, got, tc.want)
		}
	}
}

// A float is taken as the decimal it prints as: 0.1 is one tenth, not
// the binary fraction nearest to it.
func TestFloatIsItsShortestDecimal(t *testing.T) {
	a, _ := ToNumber(0.1)
	b, _ := ToNumber("0.1")
	if !a.Equal(b) {
		t.Errorf("0.1 as a float64 %v differs from \"0.1\" %v", a, b)
	}
	c, _ := ToNumber(float32(0.1))
	if !c.Equal(b) {
		t.Errorf("0.1 as a float32 %v differs from \"0.1\"", c)
	}
}

func TestFloat(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want float64
	}{{-7, -7}, {uint64(1 << 60), 1 << 60}, {0.5, 0.5}, {"-9223372036854775808", math.MinInt64}} {
		n, err := ToNumber(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Float(); got != tc.want {
			t.Errorf("%#v: Float() = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestFloatWidths(t *testing.T) {
	for _, tc := range []struct {
		v    any
		bits uint
		want float64
		err  string
	}{
		{"2.5", 32, 2.5, ""},
		{"0.1", 32, float64(float32(0.1)), ""},
		{"0.1", 64, 0.1, ""},
		{"3.4e38", 32, float64(float32(3.4e38)), ""},
		{"3.5e38", 32, 0, "3.5e+38 out of the float32 range"},
		{"1e309", 64, 0, "1e+309 out of the float64 range"},
		{"-1e-50", 32, 0, "-0.000 is too small for float32: it is not zero but would become zero"},
		{"1e-50", 64, 1e-50, ""},
		{0, 32, 0, ""},
	} {
		n, err := ToNumber(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Float(n, tc.bits)
		if refused(t, fmt.Sprintf("Float(%v, %d)", tc.v, tc.bits), err, tc.err) {
			continue
		}
		if got != tc.want {
			t.Errorf("Float(%v, %d) = %v, want %v", tc.v, tc.bits, got, tc.want)
		}
	}
}

func TestUnscale(t *testing.T) {
	for _, tc := range []struct {
		v      any
		scale  *float64
		offset float64
		want   string
	}{
		{int64(-3), nil, 0, "-3"}, // untouched
		{"-25", ptr(0.1), 0, "-250"},
		{-253.5, nil, -273.5, "20"},
		{11, ptr(2.5), 1, "4"},
		{25.5, ptr(0.1), 20, "55"},    // exact: 5.5/0.1 in floats is 54.99999999999999
		{21.55, ptr(0.1), 0, "215.5"}, // not an integer: refused by Integer
	} {
		n, err := ToNumber(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := Unscale(n, tc.scale, tc.offset); got.String() != tc.want {
			t.Errorf("Unscale(%#v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestIntegerRanges(t *testing.T) {
	for _, tc := range []struct {
		v      any
		signed bool
		bits   uint
		want   uint64
		err    string
	}{
		{int64(-32768), true, 16, 0x8000, ""},
		{int64(-32769), true, 16, 0, "-32769 below the int16 minimum"},
		{int64(32767), true, 16, 0x7FFF, ""},
		{32768.0, true, 16, 0, "32768 above the int16 maximum"},
		{int8(-1), true, 8, 0xFF, ""},
		{200, true, 8, 0, "200 above the int8 maximum"},
		{255, false, 8, 0xFF, ""},
		{256, false, 8, 0, "256 above the uint8 maximum"},
		{65535.0, false, 16, 65535, ""},
		{"65535.000", false, 16, 65535, ""},
		{65535.4, false, 16, 0, "65535.4 is not an integer (the tag is uint16; values are never rounded)"},
		{1.5, true, 16, 0, "1.5 is not an integer (the tag is int16; values are never rounded)"},
		{"1.0000000000000000001", true, 64, 0, "1 is not an integer (the tag is int64; values are never rounded)"},
		{-0.4, false, 16, 0, "-0.4 is not an integer (the tag is uint16; values are never rounded)"},
		{-1, false, 16, 0, "-1 below the uint16 minimum 0"},
		{"-1", false, 32, 0, "-1 below the uint32 minimum 0"},
		{1.5e10, true, 32, 0, "15000000000 above the int32 maximum"},
		{"18446744073709551615", false, 64, 1<<64 - 1, ""},
		{"18446744073709551616", false, 64, 0, "18446744073709551616 above the uint64 maximum"},
		{"-9223372036854775808", true, 64, 1 << 63, ""},
		{"9223372036854775808", true, 64, 0, "9223372036854775808 above the int64 maximum"},
		{-3, true, 32, 0xFFFFFFFD, ""},
		{true, false, 16, 1, ""},
		{1e300, true, 64, 0, "1e+300 above the int64 maximum"},
	} {
		n, err := ToNumber(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Integer(n, tc.signed, tc.bits)
		if refused(t, fmt.Sprintf("%#v as signed=%v/%d", tc.v, tc.signed, tc.bits), err, tc.err) {
			continue
		}
		if got != tc.want {
			t.Errorf("%#v as signed=%v/%d: %#x, %v; want %#x", tc.v, tc.signed, tc.bits, got, err, tc.want)
		}
	}
}

func TestBool(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want bool
		err  string
	}{
		{true, true, ""}, {false, false, ""},
		{1, true, ""}, {uint8(0), false, ""}, {1.0, true, ""}, {0.0, false, ""},
		{"true", true, ""}, {" False ", false, ""}, {"1", true, ""}, {json.Number("0"), false, ""},
		{2, false, "2 is not a bool (want true, false, 0 or 1)"},
		{-1, false, "-1 is not a bool (want true, false, 0 or 1)"},
		{0.5, false, "0.5 is not a bool (want true, false, 0 or 1)"},
		{"yes", false, `"yes" is not a number`},
	} {
		got, err := Bool(tc.v)
		if refused(t, fmt.Sprintf("Bool(%#v)", tc.v), err, tc.err) {
			continue
		}
		if got != tc.want {
			t.Errorf("Bool(%#v) = %v, %v; want %v", tc.v, got, err, tc.want)
		}
	}
}

// A transport wraps the errors in its own sentinel; the text reads as it
// always has.
func TestWrappedInTransportSentinel(t *testing.T) {
	errTransport := errors.New("modbus: invalid value")
	n, _ := ToNumber(70000)
	_, err := Integer(n, false, 16)
	err = fmt.Errorf("%w: %w", errTransport, err)
	if got, want := err.Error(), "modbus: invalid value: 70000 above the uint16 maximum"; got != want {
		t.Errorf("wrapped error %q, want %q", got, want)
	}
	if !errors.Is(err, errTransport) || !errors.Is(err, ErrValue) {
		t.Errorf("wrapped error %v matches neither sentinel", err)
	}
}

func TestBigEndian(t *testing.T) {
	ten := 10.0
	for _, tc := range []struct {
		v     any
		typ   Type
		scale *float64
		want  string // hex, or "" for a refusal
	}{
		{-2, "int8", nil, "fe"},
		{200, "uint8", nil, "c8"},
		{-12345, "int16", nil, "cfc7"},
		{54321, "uint16", nil, "d431"},
		{"-123456789", "int32", nil, "f8a432eb"},
		{uint64(1) << 63, "uint64", nil, "8000000000000000"},
		{-12.625, "float32", nil, "c14a0000"},
		{1.5, "float64", nil, "3ff8000000000000"},
		{25, "int16", &ten, ""}, // 2.5 is not an integer
		{250, "int16", &ten, "0019"},
		{70000, "uint16", nil, ""},
		{1, "string", nil, ""},
	} {
		b, err := BigEndian(tc.v, tc.typ, tc.scale, 0)
		switch {
		case tc.want == "" && (err == nil || !errors.Is(err, ErrValue)):
			t.Errorf("%v as %s: % x %v, want a refusal", tc.v, tc.typ, b, err)
		case tc.want != "" && (err != nil || hex.EncodeToString(b) != tc.want):
			t.Errorf("%v as %s: % x %v, want %s", tc.v, tc.typ, b, err, tc.want)
		}
	}
}

// TestFromBigEndianInvertsBigEndian decodes what BigEndian wrote, for
// every numeric type, and refuses the types that are not numbers.
func TestFromBigEndianInvertsBigEndian(t *testing.T) {
	cases := []struct {
		typ  Type
		in   any
		want any
	}{
		{TypeInt8, -7, int8(-7)}, {TypeUint8, 200, uint8(200)},
		{TypeInt16, -300, int16(-300)}, {TypeUint16, 65000, uint16(65000)},
		{TypeInt32, -70000, int32(-70000)}, {TypeUint32, 4000000000, uint32(4000000000)},
		{TypeInt64, -1 << 40, int64(-1 << 40)}, {TypeUint64, uint64(1) << 63, uint64(1) << 63},
		{TypeFloat32, 1.5, float32(1.5)}, {TypeFloat64, -2.25, -2.25},
	}
	for _, c := range cases {
		b, err := BigEndian(c.in, c.typ, nil, 0)
		if err != nil {
			t.Fatalf("%s %v: %v", c.typ, c.in, err)
		}
		if got, ok := FromBigEndian(c.typ, b); !ok || got != c.want {
			t.Errorf("%s: FromBigEndian(% x) = %v (%T), %v; want %v (%T)", c.typ, b, got, got, ok, c.want, c.want)
		}
	}
	for _, typ := range []Type{TypeBool, TypeString} {
		if v, ok := FromBigEndian(typ, []byte{1, 2}); ok {
			t.Errorf("FromBigEndian(%s) = %v, true; want false", typ, v)
		}
	}
}
