package tagvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
		want Number
		err  string
	}{
		{true, Number{isInt: true, u: 1}, ""},
		{false, Number{isInt: true}, ""},
		{-5, Number{isInt: true, neg: true, u: 5}, ""},
		{int64(math.MinInt64), Number{isInt: true, neg: true, u: 1 << 63}, ""},
		{uint64(math.MaxUint64), Number{isInt: true, u: math.MaxUint64}, ""},
		{uint8(9), Number{isInt: true, u: 9}, ""},
		{float32(1.5), Number{f: 1.5}, ""},
		{-2.5, Number{f: -2.5}, ""},
		{json.Number("-12"), Number{isInt: true, neg: true, u: 12}, ""},
		{json.Number("1e3"), Number{f: 1000}, ""},
		{" 42 ", Number{isInt: true, u: 42}, ""},
		{"18446744073709551615", Number{isInt: true, u: math.MaxUint64}, ""},
		{"TRUE", Number{isInt: true, u: 1}, ""},
		{"false", Number{isInt: true}, ""},
		{"0.25", Number{f: 0.25}, ""},
		{"x", Number{}, `"x" is not a number`},
		{"", Number{}, `"" is not a number`},
		{[]byte("1"), Number{}, "[]uint8 is not a number"},
		{nil, Number{}, "<nil> is not a number"},
	} {
		got, err := ToNumber(tc.v)
		if refused(t, fmt.Sprintf("ToNumber(%#v)", tc.v), err, tc.err) {
			continue
		}
		if got != tc.want {
			t.Errorf("ToNumber(%#v) = %+v, %v; want %+v", tc.v, got, err, tc.want)
		}
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

func TestUnscale(t *testing.T) {
	for _, tc := range []struct {
		v      any
		scale  *float64
		offset float64
		want   Number
	}{
		{int64(-3), nil, 0, Number{isInt: true, neg: true, u: 3}}, // untouched: stays exact
		{"-25", ptr(0.1), 0, Number{f: -250}},
		{-253.5, nil, -273.5, Number{f: 20}},
		{11, ptr(2.5), 1, Number{f: 4}},
	} {
		n, err := ToNumber(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := Unscale(n, tc.scale, tc.offset); got != tc.want {
			t.Errorf("Unscale(%#v) = %+v, want %+v", tc.v, got, tc.want)
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
		{65535.4, false, 16, 65535, ""},
		{65535.5, false, 16, 0, "65536 above the uint16 maximum"},
		{-0.4, false, 16, 0, ""},
		{-1, false, 16, 0, "-1 below the uint16 minimum 0"},
		{"-1", false, 32, 0, "-1 below the uint32 minimum 0"},
		{1.5e10, true, 32, 0, "15000000000 above the int32 maximum"},
		{"18446744073709551615", false, 64, 1<<64 - 1, ""},
		{"-9223372036854775808", true, 64, 1 << 63, ""},
		{"9223372036854775808", true, 64, 0, "9223372036854775808 above the int64 maximum"},
		{-2.5, true, 32, 0xFFFFFFFD, ""}, // rounds half away from zero
		{true, false, 16, 1, ""},
		{1e300, true, 64, 0, "1e+300 out of range"},
		{-1e300, true, 64, 0, "-1e+300 out of range"},
		{math.NaN(), false, 16, 0, "NaN does not fit an integer"},
		{math.Inf(-1), true, 16, 0, "-Inf does not fit an integer"},
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
