package modbus

import (
	"errors"
	"testing"
)

func TestByteOrderInvolution(t *testing.T) {
	b := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, o := range []ByteOrder{ABCD, DCBA, BADC, CDAB} {
		if got := o.toBig(o.toBig(b)); string(got) != string(b) {
			t.Errorf("%s twice: % x", o, got)
		}
	}
	if got := CDAB.toBig(b); string(got) != string([]byte{7, 8, 5, 6, 3, 4, 1, 2}) {
		t.Errorf("CDAB 64-bit: % x", got)
	}
}

func TestIntegerRanges(t *testing.T) {
	for _, tc := range []struct {
		v      any
		signed bool
		bits   uint
		want   uint64
		err    bool
	}{
		{int64(-32768), true, 16, 0x8000, false},
		{int64(-32769), true, 16, 0, true},
		{int64(32767), true, 16, 0x7FFF, false},
		{32768.0, true, 16, 0, true},
		{65535.4, false, 16, 65535, false},
		{-0.4, false, 16, 0, false},
		{"-1", false, 32, 0, true},
		{"18446744073709551615", false, 64, 1<<64 - 1, false},
		{"-9223372036854775808", true, 64, 1 << 63, false},
		{1e300, true, 64, 0, true},
	} {
		n, err := toNumber(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := integer(n, tc.signed, tc.bits)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("%v as %v/%d: %#x %v", tc.v, tc.signed, tc.bits, got, err)
		}
		if err != nil && !errors.Is(err, ErrValue) {
			t.Errorf("%v: error %v is not ErrValue", tc.v, err)
		}
	}
}

func TestPlanLimits(t *testing.T) {
	var tags []*tag
	for i := 0; i < 130; i++ {
		tags = append(tags, &tag{table: holding, start: uint16(i), count: 1})
	}
	tags = append(tags, &tag{table: input, start: 0, count: 1}, &tag{table: holding, start: 300, count: 4})
	reqs := plan(tags, true)
	if len(reqs) != 4 || reqs[0].count != 125 || reqs[1].count != 5 || reqs[2].start != 300 || reqs[3].table != input {
		t.Errorf("plan: %+v", reqs)
	}
	if got := len(plan(tags, false)); got != len(tags) {
		t.Errorf("unmerged plan has %d requests, want %d", got, len(tags))
	}
}
