package mqtt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/transports"
)

func TestEncodeValue(t *testing.T) {
	ts := time.UnixMilli(1764556800123)
	b, err := EncodeValue(transports.Value{Tag: "t", Value: 21.5, Quality: transports.Good, Timestamp: ts}, 9)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"timestamp":1764556800123,"value":21.5,"quality":"good","epoch":9}` {
		t.Fatalf("good value: %s", b)
	}
	b, err = EncodeValue(transports.Value{Tag: "t", Value: 1, Err: errors.New("timeout"), Timestamp: ts}, 9)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"timestamp":1764556800123,"quality":"bad","error":"timeout","epoch":9}` {
		t.Fatalf("bad value: %s", b)
	}
	// A zero value is a value, not an absent one.
	b, err = EncodeValue(transports.Value{Tag: "z", Value: 0, Quality: transports.Good, Timestamp: ts}, 1)
	if err != nil || string(b) != `{"timestamp":1764556800123,"value":0,"quality":"good","epoch":1}` {
		t.Fatalf("zero value: %s %v", b, err)
	}
	if _, err := EncodeValue(transports.Value{Tag: "ch", Value: make(chan int)}, 1); err == nil {
		t.Fatal("unencodable value accepted")
	}
}

func TestEncodeStatus(t *testing.T) {
	b := EncodeStatus(StatusMessage{Session: "s", Owner: "o", Epoch: 2, State: StateServing, ServiceLevelFull: true, Timestamp: 5})
	if string(b) != `{"session":"s","owner":"o","epoch":2,"state":"serving","service_level_full":true,"timestamp":5}` {
		t.Fatalf("status %s", b)
	}
	var s StatusMessage
	if err := json.Unmarshal(EncodeStatus(StatusMessage{State: StateReleased}), &s); err != nil || s.Timestamp == 0 {
		t.Fatalf("zero timestamp not filled: %+v %v", s, err)
	}
	// The will is written at connect: it names the connection, not the
	// unknown instant of its loss.
	lost := EncodeStatus(StatusMessage{State: StateLost})
	if err := json.Unmarshal(lost, &s); err != nil || s.ConnectedAt == 0 || strings.Contains(string(lost), `"timestamp"`) {
		t.Fatalf("lost status %s: want connected_at and no timestamp", lost)
	}
}

// marshalValue is what EncodeValue rendered before it had its own
// encoder: json.Marshal of the ValueMessage. EncodeValue must give the
// same bytes, or the same error.
func marshalValue(v transports.Value, epoch uint64) ([]byte, error) {
	m := ValueMessage{Timestamp: millis(v.Timestamp), Quality: string(v.Quality), Epoch: epoch}
	if m.Quality == "" {
		m.Quality = string(transports.Good)
	}
	if v.Err != nil {
		m.Quality = string(transports.Bad)
		m.Error = v.Err.Error()
	}
	if m.Quality == string(transports.Good) {
		m.Value = v.Value
	}
	return json.Marshal(m)
}

func checkLikeMarshal(t *testing.T, v transports.Value, epoch uint64) {
	t.Helper()
	got, gerr := EncodeValue(v, epoch)
	want, werr := marshalValue(v, epoch)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("value %#v: error %v, json.Marshal's %v", v.Value, gerr, werr)
	}
	if werr != nil {
		if !strings.Contains(gerr.Error(), werr.Error()) {
			t.Fatalf("value %#v: error %q does not carry json.Marshal's %q", v.Value, gerr, werr)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("value %#v:\n got %s\nwant %s", v.Value, got, want)
	}
}

type textValue struct{ s string }

func (x textValue) MarshalText() ([]byte, error) { return []byte("<" + x.s + ">"), nil }

type level int

func TestEncodeValueLikeMarshal(t *testing.T) {
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 21.5, -180.25, 1e-6, 9.99999e-7, 1e-7, 1.5e-9, 1e20, 1e21, 1.2345e21,
		-1e21, 123456789012345678, math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, 1 / 3.0, 2.5e-300, 1e300, 100, 1e6, 65535.5}
	strs := []string{"", "plain", `quo"te`, `back\slash`, "nl\nline", "tab\tcr\r", "\b\f", "\x00\x01\x1f\x7f", "<html>&amp;",
		"caf\u00e9", "\u2028\u2029", "emoji \U0001F600", "bad \xff utf8", "\xe2\x82", "tail\xc3", "a\u2027b\u202ac"}
	var vals []any
	for _, f := range floats {
		vals = append(vals, f, -f, float32(f), -float32(f))
	}
	for _, s := range strs {
		vals = append(vals, s)
	}
	vals = append(vals, true, false, 0, -1, math.MaxInt, math.MinInt, int8(math.MinInt8), int8(math.MaxInt8), int16(math.MinInt16),
		int16(-2), int32(math.MinInt32), int32(7), int64(math.MinInt64), int64(math.MaxInt64), uint(math.MaxUint), uint8(255),
		uint16(65535), uint16(1000), uint32(math.MaxUint32), uint64(math.MaxUint64), uintptr(9),
		// What encoding/json renders itself: Marshalers, named types, bytes,
		// slices, maps, nil pointers, times.
		json.Number("12.50"), textValue{"x"}, level(3), []byte("raw\x00"), []int{1, 2}, map[string]any{"b": 1, "a": "<"},
		(*int)(nil), time.UnixMilli(1764556800123).UTC(), struct{ A string }{"&"},
		// Refused, as json.Marshal refuses them.
		math.NaN(), math.Inf(1), math.Inf(-1), float32(math.NaN()), float32(math.Inf(-1)), make(chan int), func() {},
		json.RawMessage("{bad"))
	ts := time.UnixMilli(1764556800123)
	for _, x := range vals {
		checkLikeMarshal(t, transports.Value{Tag: "t", Value: x, Quality: transports.Good, Timestamp: ts}, 7)
		checkLikeMarshal(t, transports.Value{Tag: "t", Value: x, Timestamp: ts}, math.MaxUint64)
		// A bad value carries no value, only its error.
		checkLikeMarshal(t, transports.Value{Tag: "t", Value: x, Quality: transports.Bad, Timestamp: ts}, 1)
	}
	for _, s := range strs {
		checkLikeMarshal(t, transports.Value{Tag: "t", Value: 1, Err: errors.New(s), Timestamp: ts}, 2)
		checkLikeMarshal(t, transports.Value{Tag: "t", Value: 1, Quality: transports.Quality(s), Timestamp: ts}, 3)
	}
	// No value, a zero time, negative and pre-1970 timestamps.
	for _, v := range []transports.Value{
		{Tag: "n", Quality: transports.Good},
		{Tag: "n", Value: 1},
		{Tag: "n", Value: 1, Timestamp: time.UnixMilli(-1500)},
		{Tag: "n", Value: 1, Timestamp: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)},
		{Tag: "n", Value: 1, Err: errors.New(""), Timestamp: ts},
	} {
		checkLikeMarshal(t, v, 0)
	}
	if _, err := EncodeValue(transports.Value{Tag: "nan", Value: math.NaN()}, 1); !errors.As(err, new(*json.UnsupportedValueError)) {
		t.Fatalf("NaN: %v, want a *json.UnsupportedValueError", err)
	}
}

func FuzzEncodeValue(f *testing.F) {
	f.Add("x", 21.5, int64(-3), uint64(7), "good", "")
	f.Add("<\u2028\xff>", 1e-7, int64(math.MinInt64), uint64(math.MaxUint64), "", "timeout\n")
	f.Add("", math.Inf(1), int64(0), uint64(0), "bad", "e")
	f.Fuzz(func(t *testing.T, s string, fl float64, i int64, u uint64, quality, errText string) {
		ts := time.UnixMilli(i / 1000)
		var err error
		if errText != "" {
			err = errors.New(errText)
		}
		for _, x := range []any{s, fl, float32(fl), i, int32(i), int16(i), u, uint32(u), uint8(u), fl > 0} {
			checkLikeMarshal(t, transports.Value{Tag: s, Value: x, Quality: transports.Quality(quality), Err: err, Timestamp: ts}, u)
		}
	})
}

func BenchmarkEncodeValue(b *testing.B) {
	for _, x := range []any{uint16(1000), 21.5, "running"} {
		v := transports.Value{Tag: "t", Value: x, Quality: transports.Good, Timestamp: time.Now()}
		b.Run(fmt.Sprintf("%T", x), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeValue(v, 7); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%T/json.Marshal", x), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := marshalValue(v, 7); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
