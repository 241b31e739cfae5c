package s7

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/robinson/gos7"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/modbus"
	"github.com/leasebridge/leasebridge/transports/s7/s7test"
	"github.com/leasebridge/leasebridge/transports/transporttest"
)

type rig struct {
	*transporttest.Rig[*Transport]
	srv *s7test.Server
}

// newRig starts the S7 test server (rack 0, slot 1) behind a counting
// proxy and builds a transport for dev.
func newRig(t *testing.T, pdu int, dev *routes.Device) *rig {
	t.Helper()
	srv, err := s7test.Start(0, 1, pdu)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	px := transporttest.Proxy(t, srv.Addr())
	dev.Kind = Kind
	dev.Address = px.Addr()
	if dev.Settings == nil {
		dev.Settings = &Config{Slot: 1}
	}
	tr, err := New("plc7", dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, peak, _ := srv.Conns(); peak > 1 {
			t.Errorf("server counted %d concurrent connections, want at most 1", peak)
		}
	})
	return &rig{Rig: transporttest.NewRig(t, px, tr), srv: srv}
}

func ptr[T any](v T) *T { return &v }

var mustGood = transporttest.MustGood

// db1 is a data block laid out by hand with encoding/binary.
func db1() []byte {
	b := make([]byte, 128)
	b[0] = 0b1010_0101
	b[1] = 200
	b[2] = 0x80 // int8 -128
	binary.BigEndian.PutUint16(b[4:], uint16(0xCFC7))
	binary.BigEndian.PutUint16(b[6:], 54321)
	binary.BigEndian.PutUint32(b[8:], math.Float32bits(-12.625))
	binary.BigEndian.PutUint32(b[12:], uint32(0xF8A432EB))
	binary.BigEndian.PutUint32(b[16:], 3123456789)
	binary.BigEndian.PutUint64(b[20:], math.Float64bits(1234.5678))
	binary.BigEndian.PutUint64(b[28:], 0xEEDDEF0B82167EEB)
	binary.BigEndian.PutUint64(b[36:], 12345678901234567890)
	copy(b[44:], append([]byte{20, 8}, "hello s7"...))
	copy(b[70:], append([]byte{10, 3}, "abcXXXX"...))
	binary.BigEndian.PutUint16(b[90:], 1500)
	return b
}

func TestReadEveryTypeAndArea(t *testing.T) {
	r := newRig(t, 240, &routes.Device{Groups: []*routes.PollGroup{{Name: "all", Tags: []*routes.Tag{
		{Name: "x0", Address: "DB1.DBX0.0"}, {Name: "x1", Address: "DB1.DBX0.1"}, {Name: "x7", Address: "db1.dbx0.7"},
		{Name: "b", Address: "DB1.DBB1"}, {Name: "i8", Address: "DB1.DBB2", Type: "SINT"},
		{Name: "int", Address: "DB1.DBW4", Type: "INT"}, {Name: "word", Address: "DB1.DBW6"},
		{Name: "real", Address: "DB1.DBD8", Type: "REAL"}, {Name: "dint", Address: "DB1.DBD12", Type: "int32"},
		{Name: "dword", Address: "DB1.DBD16"}, {Name: "lreal", Address: "DB1.DBB20", Type: "LREAL"},
		{Name: "lint", Address: "DB1.DBB28", Type: "int64"}, {Name: "ulint", Address: "DB1.DBB36", Type: "uint64"},
		{Name: "str", Address: "DB1.STRING44.20"}, {Name: "dbs", Address: "DB1.DBS44", Type: "string", Length: 20}, {Name: "str2", Address: "DB1.DBB70", Type: "string", Length: 10},
		{Name: "scaled", Address: "DB1.DBW90", Type: "INT", Scale: ptr(0.01), Offset: -5},
		{Name: "mw", Address: "MW10", Type: "INT"}, {Name: "m53", Address: "M5.3"}, {Name: "mx", Address: "MX5.2"},
		{Name: "ib", Address: "IB0"}, {Name: "e01", Address: "E0.1"}, {Name: "iw", Address: "IW2"},
		{Name: "qd", Address: "QD4", Type: "REAL"}, {Name: "a00", Address: "A0.0"}, {Name: "q00", Address: "Q0.0"},
	}}}})
	r.srv.SetDB(1, db1())
	r.srv.SetArea(s7test.AreaM, 5, []byte{0b0000_1000})
	r.srv.SetArea(s7test.AreaM, 10, []byte{0xFF, 0xFE})
	r.srv.SetArea(s7test.AreaI, 0, []byte{0b10, 0, 0x12, 0x34})
	r.srv.SetArea(s7test.AreaQ, 0, []byte{1, 0, 0, 0})
	r.srv.SetArea(s7test.AreaQ, 4, binary.BigEndian.AppendUint32(nil, math.Float32bits(0.5)))
	r.Open(t)
	if r.Tr.PDU() != 240 {
		t.Errorf("negotiated PDU %d, want the server's 240", r.Tr.PDU())
	}
	v := r.Poll(t, "all")
	mustGood(t, v, "x0", true)
	mustGood(t, v, "x1", false)
	mustGood(t, v, "x7", true)
	mustGood(t, v, "b", uint8(200))
	mustGood(t, v, "i8", int8(-128))
	mustGood(t, v, "int", int16(-12345))
	mustGood(t, v, "word", uint16(54321))
	mustGood(t, v, "real", float32(-12.625))
	mustGood(t, v, "dint", int32(-123456789))
	mustGood(t, v, "dword", uint32(3123456789))
	mustGood(t, v, "lreal", 1234.5678)
	mustGood(t, v, "lint", int64(-1234567890123456789))
	mustGood(t, v, "ulint", uint64(12345678901234567890))
	mustGood(t, v, "str", "hello s7")
	mustGood(t, v, "dbs", "hello s7")
	mustGood(t, v, "str2", "abc")
	mustGood(t, v, "scaled", 10.0)
	mustGood(t, v, "mw", int16(-2))
	mustGood(t, v, "m53", true)
	mustGood(t, v, "mx", false)
	mustGood(t, v, "ib", uint8(2))
	mustGood(t, v, "e01", true)
	mustGood(t, v, "iw", uint16(0x1234))
	mustGood(t, v, "qd", float32(0.5))
	mustGood(t, v, "a00", true)
	mustGood(t, v, "q00", true)
}

// TestBatchingByPDU reads more items than one job holds and a value larger
// than one item; the server refuses any reply over the PDU, so a Good
// value proves the packing.
func TestBatchingByPDU(t *testing.T) {
	var tags []*routes.Tag
	for i := 1; i <= 30; i++ { // 30 separate data blocks: 30 items
		tags = append(tags, &routes.Tag{Name: fmt.Sprint("d", i), Address: fmt.Sprintf("DB%d.DBW0", i), Type: "INT"})
	}
	tags = append(tags, &routes.Tag{Name: "long", Address: "DB100.STRING0.254"})
	for _, tc := range []struct{ pdu, jobs int }{{240, 4}, {480, 2}} {
		r := newRig(t, tc.pdu, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: tags}}})
		for i := 1; i <= 30; i++ {
			r.srv.SetDB(i, binary.BigEndian.AppendUint16(nil, uint16(i*100)))
		}
		long := strings.Repeat("0123456789", 25) + "abcd"
		r.srv.SetDB(100, append([]byte{254, 254}, long...))
		r.Open(t)
		before := r.srv.Jobs()
		v := r.Poll(t, "g")
		for i := 1; i <= 30; i++ {
			mustGood(t, v, fmt.Sprint("d", i), int16(i*100))
		}
		mustGood(t, v, "long", long)
		if got := r.srv.Jobs() - before; got != tc.jobs {
			t.Errorf("PDU %d: %d read jobs, want %d", tc.pdu, got, tc.jobs)
		}
	}
}

func TestWrites(t *testing.T) {
	r := newRig(t, 240, &routes.Device{Groups: []*routes.PollGroup{{Name: "w", Tags: []*routes.Tag{
		{Name: "x3", Address: "DB1.DBX0.3", Writable: true},
		{Name: "int", Address: "DB1.DBW4", Type: "INT", Writable: true},
		{Name: "real", Address: "DB1.DBD8", Type: "REAL", Writable: true},
		{Name: "lint", Address: "DB1.DBB28", Type: "LINT", Writable: true},
		{Name: "ulint", Address: "DB1.DBB36", Type: "ULINT", Writable: true},
		{Name: "lreal", Address: "DB1.DBB20", Type: "LREAL", Writable: true},
		{Name: "str", Address: "DB1.STRING44.20", Writable: true},
		{Name: "scaled", Address: "DB1.DBW90", Type: "INT", Scale: ptr(0.01), Offset: -5, Writable: true},
		{Name: "mb", Address: "MB7", Writable: true},
		{Name: "q", Address: "Q1.7", Writable: true},
		{Name: "long", Address: "DB2.STRING0.254", Writable: true},
		{Name: "ro", Address: "DB1.DBW6"},
		{Name: "far", Address: "DB1.DBW500", Writable: true},
	}}}})
	r.srv.SetDB(1, make([]byte, 128))
	r.srv.SetDB(2, make([]byte, 256))
	r.srv.SetDB(1, append([]byte{0b1000_0001}, make([]byte, 127)...))
	r.Open(t)
	ctx := context.Background()
	long := strings.Repeat("xyz", 84) + "ab"
	for _, w := range []struct {
		tag string
		v   any
	}{{"x3", true}, {"int", -300}, {"real", "2.5"}, {"lint", int64(math.MinInt64)}, {"ulint", uint64(math.MaxUint64)},
		{"lreal", -0.125}, {"str", "written"}, {"scaled", 7.5}, {"mb", 255}, {"q", 1}, {"long", long}} {
		if err := r.Tr.Write(ctx, w.tag, w.v); err != nil {
			t.Fatalf("write %s: %v", w.tag, err)
		}
	}
	db := r.srv.DB(1)
	if db[0] != 0b1000_1001 {
		t.Errorf("bit write: byte %08b, want 10001001 (neighbours kept)", db[0])
	}
	if got := int16(binary.BigEndian.Uint16(db[4:])); got != -300 {
		t.Errorf("INT %d", got)
	}
	if got := math.Float32frombits(binary.BigEndian.Uint32(db[8:])); got != 2.5 {
		t.Errorf("REAL %v", got)
	}
	if got := string(db[44:53]); got != "\x14\x07written" {
		t.Errorf("STRING bytes %q", got)
	}
	if got := int16(binary.BigEndian.Uint16(db[90:])); got != 1250 {
		t.Errorf("scaled write stored %d, want 1250", got)
	}
	if got := r.srv.Area(s7test.AreaM, 7, 1)[0]; got != 255 {
		t.Errorf("MB7 %d", got)
	}
	if got := r.srv.Area(s7test.AreaQ, 1, 1)[0]; got != 0x80 {
		t.Errorf("Q1.7 byte %08b", got)
	}
	if got := string(r.srv.DB(2)[2:256]); got != long {
		t.Errorf("long string written as %q", got)
	}
	// Clear a bit while the PLC sets another in the same byte.
	r.srv.SetDB(1, append([]byte{0b0100_1000}, db[1:]...))
	if err := r.Tr.Write(ctx, "x3", false); err != nil {
		t.Fatal(err)
	}
	if got := r.srv.DB(1)[0]; got != 0b0100_0000 {
		t.Errorf("bit clear: byte %08b, want 01000000", got)
	}
	v := r.Poll(t, "w")
	mustGood(t, v, "lint", int64(math.MinInt64))
	mustGood(t, v, "ulint", uint64(math.MaxUint64))
	mustGood(t, v, "lreal", -0.125)
	mustGood(t, v, "str", "written")
	mustGood(t, v, "scaled", 7.5)
	mustGood(t, v, "long", long)
	mustGood(t, v, "q", true)

	for _, bad := range []struct {
		tag  string
		v    any
		want error
	}{
		{"int", 40000, ErrValue}, {"mb", -1, ErrValue}, {"str", strings.Repeat("x", 21), ErrValue},
		{"x3", "maybe", ErrValue}, {"ro", 1, ErrReadOnly}, {"nope", 1, ErrUnknownTag}, {"far", 1, ErrItem},
	} {
		err := r.Tr.Write(ctx, bad.tag, bad.v)
		if !errors.Is(err, bad.want) || !strings.Contains(err.Error(), bad.tag) {
			t.Errorf("write %s=%v: %v, want %v naming the tag", bad.tag, bad.v, err, bad.want)
		}
	}
	if err := r.Tr.Write(ctx, "far", 1); err == nil || !strings.Contains(err.Error(), "address out of range") {
		t.Errorf("write beyond the DB: %v", err)
	}
	if _, _, total := r.srv.Conns(); total != 1 {
		t.Errorf("%d connections; a refused item must not cost a reconnect", total)
	}
}

func TestBadAddresses(t *testing.T) {
	r := newRig(t, 240, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{
		{Name: "ok", Address: "DB1.DBW0", Type: "INT"},
		{Name: "edge", Address: "DB1.DBW2", Type: "INT"}, // touches ok, ends past the DB
		{Name: "nodb", Address: "DB9.DBW0"},
		{Name: "far", Address: "DB1.DBD100"},
	}}}})
	r.srv.SetDB(1, []byte{0, 42, 0})
	r.Open(t)
	v := r.Poll(t, "g")
	mustGood(t, v, "ok", int16(42))
	for name, want := range map[string]string{"edge": "address out of range", "far": "address out of range", "nodb": "Item not available"} {
		b := v[name]
		if b.Quality != transports.Bad || !errors.Is(b.Err, ErrItem) {
			t.Errorf("%s: %+v", name, b)
			continue
		}
		if msg := b.Err.Error(); !strings.Contains(strings.ToLower(msg), strings.ToLower(want)) || !strings.Contains(msg, `"`+name+`"`) {
			t.Errorf("%s: error %q lacks %q or the tag name", name, msg, want)
		}
	}
	if !r.Tr.State().Converged {
		t.Error("a refused item marked the transport unconverged")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		tag  routes.Tag
		want error
		has  string
	}{
		{routes.Tag{Name: "a", Address: "40001"}, ErrAddress, "DB<n>.DBX"},
		{routes.Tag{Name: "b", Address: "DB1.DBX0"}, ErrAddress, ".<bit>"},
		{routes.Tag{Name: "c", Address: "DB1.DBX0.8"}, ErrAddress, "0..7"},
		{routes.Tag{Name: "d", Address: "DB0.DBW0"}, ErrAddress, "1..65535"},
		{routes.Tag{Name: "e", Address: "DB1.DBW0.1"}, ErrAddress, "only a bit address"},
		{routes.Tag{Name: "f", Address: "DB1.DBW0", Type: "REAL"}, ErrConfig, "DBB"},
		{routes.Tag{Name: "g", Address: "DB1.DBD0", Type: "decimal"}, ErrConfig, "LREAL"},
		{routes.Tag{Name: "h", Address: "DB1.STRING0.300"}, ErrAddress, "1..254"},
		{routes.Tag{Name: "i", Address: "DB1.DBB0", Type: "string"}, ErrConfig, "length"},
		{routes.Tag{Name: "j", Address: "DB1.DBW0", Settings: &modbus.TagConfig{ByteOrder: "DCBA"}}, ErrConfig, "big-endian"},
		{routes.Tag{Name: "k", Address: "M10"}, ErrAddress, "M10.3"},
	} {
		_, err := New("dev", &routes.Device{Kind: Kind, Address: "127.0.0.1",
			Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{&tc.tag}}}})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), `"`+tc.tag.Name+`"`) || !strings.Contains(err.Error(), tc.has) {
			t.Errorf("tag %s (%s): error %v, want %v naming the tag and saying %q", tc.tag.Name, tc.tag.Address, err, tc.want, tc.has)
		}
	}
	tr, err := New("dev", &routes.Device{Kind: Kind, Address: "10.0.0.1"})
	if err != nil || tr.address != "10.0.0.1:102" {
		t.Errorf("bare host: %v %v", tr, err)
	}
}

func TestRackSlot(t *testing.T) {
	r := newRig(t, 240, &routes.Device{Settings: &Config{Slot: 2}, Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "MW0"}}}}})
	err := r.Tr.Open(r.Owner)
	if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "rack 0, slot 2") {
		t.Fatalf("Open with the wrong slot: %v, want ErrConnect naming rack and slot", err)
	}
}

func TestRestartAndReconnect(t *testing.T) {
	r := newRig(t, 480, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "MW0"}}}}})
	r.srv.SetArea(s7test.AreaM, 0, []byte{0, 1})
	r.Open(t)
	mustGood(t, r.Poll(t, "g"), "x", uint16(1))
	r.srv.Stop()
	vals, err := r.Tr.Poll(context.Background(), "g")
	if !errors.Is(err, ErrIO) && !errors.Is(err, ErrConnect) {
		t.Fatalf("poll of a stopped PLC: %v", err)
	}
	if vals[0].Quality != transports.Bad || vals[0].Err == nil || r.Tr.State().Converged {
		t.Errorf("after failure: %+v, state %+v", vals, r.Tr.State())
	}
	r.WaitConns(t, 0)
	if _, err := r.Tr.Poll(context.Background(), "g"); !errors.Is(err, ErrConnect) {
		t.Errorf("poll while down: %v, want ErrConnect", err)
	}
	if err := r.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	r.srv.SetArea(s7test.AreaM, 0, []byte{0, 2})
	mustGood(t, r.Poll(t, "g"), "x", uint16(2))
	if !r.Tr.State().Converged {
		t.Error("not converged after reconnecting")
	}
}

func TestTimeouts(t *testing.T) {
	dev := &routes.Device{ConnectTimeout: routes.Duration(300 * time.Millisecond), RequestTimeout: routes.Duration(200 * time.Millisecond),
		Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "MW0"}}}}}
	r := newRig(t, 240, dev)
	r.Open(t)
	r.srv.Hang()
	if _, err := r.Tr.Poll(context.Background(), "g"); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "plc7") {
		t.Fatalf("poll of a hung PLC: %v, want ErrTimeout naming the device", err)
	}
	r.WaitConns(t, 0)
	r.srv.Unhang()
	r.Poll(t, "g")
	if st := r.Proxy.Stats(); st.Accepted != 2 {
		t.Errorf("%d connections, want 2", st.Accepted)
	}

}

// TestAdoptConn fails if the pinned gos7 changes the field the transport
// hands its socket through.
func TestAdoptConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	h := gos7.NewTCPClientHandler("127.0.0.1:102", 0, 1)
	if err := adoptConn(h, a); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = b.Read(make([]byte, 64)); _ = b.Close() }()
	// With the socket adopted, Connect must not dial 127.0.0.1:102 but talk
	// over the pipe, which the other end closes.
	if err := h.Connect(); err == nil || strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Connect over the adopted socket: %v", err)
	}
}

func TestPack(t *testing.T) {
	var ss []span
	for i := 0; i < 45; i++ {
		ss = append(ss, span{area: areaDB, db: i + 1, size: 1 + i%7})
	}
	ss = append(ss, span{area: areaDB, db: 99, size: 700})
	for _, pdu := range []int{240, 480} {
		jobs := pack(ss, pdu)
		covered := map[int]int{}
		for _, job := range jobs {
			req, resp := readReqHeader, readAckHeader
			if len(job) > maxItems {
				t.Errorf("PDU %d: job of %d items", pdu, len(job))
			}
			for _, c := range job {
				req += readItemSpec
				resp += readItemHeader + c.size + c.size%2
				covered[c.span] += c.size
			}
			if req > pdu || resp > pdu {
				t.Errorf("PDU %d: job request %d reply %d bytes", pdu, req, resp)
			}
		}
		for i, s := range ss {
			if covered[i] != s.size {
				t.Errorf("PDU %d: span %d covered %d of %d bytes", pdu, i, covered[i], s.size)
			}
		}
	}
}

// TestEveryTagType: the PLC takes every type of the one list.
func TestEveryTagType(t *testing.T) {
	for _, typ := range routes.TagTypes {
		addr := "DB1.DBB0"
		if typ == "bool" {
			addr = "DB1.DBX0.0"
		}
		dev := &routes.Device{Kind: Kind, Address: "127.0.0.1", Settings: &Config{Slot: 1},
			Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: addr, Type: typ, Length: 4}}}}}
		if _, err := New("plc7", dev); err != nil {
			t.Errorf("type %s: %v", typ, err)
		}
	}
}
