package modbus

import (
	"errors"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
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

// The value conversion itself is tested in package tagvalue; here, that
// encodeRegisters scales, range-checks and orders the bytes, and that its
// refusals wrap ErrValue with the value and the limit in the text.
func TestEncodeRegisters(t *testing.T) {
	tenth := 0.1
	for _, tc := range []struct {
		tag  tag
		v    any
		want []byte
		err  string
	}{
		{tag{typ: tagvalue.TypeInt16, order: ABCD}, int64(-32768), []byte{0x80, 0x00}, ""},
		{tag{typ: tagvalue.TypeInt16, order: DCBA}, "-2", []byte{0xFE, 0xFF}, ""},
		{tag{typ: tagvalue.TypeInt16, order: ABCD, scale: &tenth}, -25.0, []byte{0xFF, 0x06}, ""},
		{tag{typ: tagvalue.TypeUint32, order: CDAB}, uint32(0x01020304), []byte{3, 4, 1, 2}, ""},
		{tag{typ: tagvalue.TypeInt16, order: ABCD}, 40000, nil, "modbus: invalid value: 40000 above the int16 maximum"},
		{tag{typ: tagvalue.TypeUint16, order: ABCD}, -1, nil, "modbus: invalid value: -1 below the uint16 minimum 0"},
		{tag{typ: tagvalue.TypeInt32, order: ABCD}, 1.5e10, nil, "modbus: invalid value: 15000000000 above the int32 maximum"},
		{tag{typ: tagvalue.TypeUint64, order: ABCD}, "x", nil, `modbus: invalid value: "x" is not a number`},
		{tag{typ: tagvalue.TypeInt64, order: ABCD}, 1e300, nil, "modbus: invalid value: 1e+300 above the int64 maximum"},
		{tag{typ: tagvalue.TypeInt16, order: ABCD}, 1.5, nil, "modbus: invalid value: 1.5 is not an integer (the tag is int16; values are never rounded)"},
		{tag{typ: tagvalue.TypeInt16, order: ABCD, scale: &tenth}, 2.55, nil, "modbus: invalid value: 25.5 is not an integer (the tag is int16; values are never rounded)"},
		{tag{typ: tagvalue.TypeFloat32, order: ABCD}, "1e39", nil, "modbus: invalid value: 1e+39 out of the float32 range"},
	} {
		got, err := encodeRegisters(&tc.tag, tc.v)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || !errors.Is(err, ErrValue) {
				t.Errorf("%s %#v: error %v, want %q wrapping ErrValue", tc.tag.typ, tc.v, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("%s/%s %#v: % x, %v; want % x", tc.tag.typ, tc.tag.order, tc.v, got, err, tc.want)
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

// TestEveryTagType: the device takes every type of the one list, so the
// list and the codec cannot drift apart.
func TestEveryTagType(t *testing.T) {
	for _, typ := range types {
		x := &routes.Tag{Name: "x", Address: "1", Type: typ, Length: 4}
		if typ == "bool" {
			x.Settings = &TagConfig{Bit: ptr(3)}
		}
		dev := &routes.Device{Kind: KindTCP, Address: "127.0.0.1:502",
			Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{x}}}}
		if _, err := New("plc1", dev); err != nil {
			t.Errorf("type %s: %v", typ, err)
		}
	}
}
