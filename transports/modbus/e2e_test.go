package modbus

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Wire permutations written out by hand, independent of the package's
// ByteOrder code: wire[i] = bigEndian[perm[i]].
var (
	perm16 = map[string][]int{"ABCD": {0, 1}, "CDAB": {0, 1}, "DCBA": {1, 0}, "BADC": {1, 0}}
	perm32 = map[string][]int{"ABCD": {0, 1, 2, 3}, "DCBA": {3, 2, 1, 0}, "BADC": {1, 0, 3, 2}, "CDAB": {2, 3, 0, 1}}
	perm64 = map[string][]int{
		"ABCD": {0, 1, 2, 3, 4, 5, 6, 7}, "DCBA": {7, 6, 5, 4, 3, 2, 1, 0},
		"BADC": {1, 0, 3, 2, 5, 4, 7, 6}, "CDAB": {6, 7, 4, 5, 2, 3, 0, 1},
	}
)

func permute(order string, big []byte) []byte {
	var p []int
	switch len(big) {
	case 2:
		p = perm16[order]
	case 4:
		p = perm32[order]
	case 8:
		p = perm64[order]
	}
	out := make([]byte, len(big))
	for i, j := range p {
		out[i] = big[j]
	}
	return out
}

type typeCase struct {
	typ  string
	addr int
	big  []byte // big-endian value bytes
	want any
}

func typeCases() []typeCase {
	be16 := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	be64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	return []typeCase{
		{"int16", 0, be16(uint16(0xCFC7)), int16(-12345)},
		{"uint16", 1, be16(54321), uint16(54321)},
		{"int32", 2, be32(uint32(0xF8A432EB)), int32(-123456789)},
		{"uint32", 4, be32(3123456789), uint32(3123456789)},
		{"float32", 6, be32(math.Float32bits(1234.5678)), float32(1234.5678)},
		{"int64", 8, be64(0xEEDDEF0B82167EEB), int64(-1234567890123456789)},
		{"uint64", 12, be64(12345678901234567890), uint64(12345678901234567890)},
		{"float64", 16, be64(math.Float64bits(-9876.54321)), float64(-9876.54321)},
	}
}

// TestReadEveryTypeAndByteOrder reads each numeric type in each byte order
// (as the device default and as a per-tag override), a string, bits in a
// register, coils, discrete inputs, input registers and a scaled value.
func TestReadEveryTypeAndByteOrder(t *testing.T) {
	p := newPLC()
	var groups []*routes.PollGroup
	for oi, order := range []string{"ABCD", "DCBA", "BADC", "CDAB"} {
		base := 1000 * (oi + 1)
		g := &routes.PollGroup{Name: order}
		for _, c := range typeCases() {
			p.setWire(p.holding[:], base+c.addr, permute(order, c.big))
			g.Tags = append(g.Tags, &routes.Tag{Name: order + "_" + c.typ, Address: strconv.Itoa(base + c.addr), Type: c.typ, Settings: &TagConfig{ByteOrder: order}})
		}
		groups = append(groups, g)
	}
	// Device default CDAB, no per-tag order.
	def := &routes.PollGroup{Name: "default"}
	for _, c := range typeCases() {
		p.setWire(p.holding[:], 5000+c.addr, permute("CDAB", c.big))
		def.Tags = append(def.Tags, &routes.Tag{Name: "def_" + c.typ, Address: strconv.Itoa(5000 + c.addr), Type: c.typ})
	}
	groups = append(groups, def)
	// Strings: big-endian registers, and byte-swapped ones.
	p.setWire(p.holding[:], 6000, []byte("HELLO-PLC\x00"))
	p.setWire(p.holding[:], 6010, []byte("EHLL-OLP\x00C"))
	p.holding[6020] = 0b1000_0000_0000_0100
	p.input[7000] = 0xFFFE // int16 -2
	p.input[7001] = 250    // 25.0 after scale 0.1
	p.coils[10], p.coils[12] = true, false
	p.discrete[3] = true
	misc := &routes.PollGroup{Name: "misc", Tags: []*routes.Tag{
		{Name: "str", Address: "6000", Type: "string", Length: 5},
		{Name: "str_swapped", Address: "6010", Type: "string", Length: 5, Settings: &TagConfig{ByteOrder: "BADC"}},
		{Name: "bit2", Address: "6020", Type: "bool", Settings: &TagConfig{Bit: ptr(2)}},
		{Name: "bit15", Address: "6020", Type: "bool", Settings: &TagConfig{Bit: ptr(15)}},
		{Name: "bit3", Address: "6020", Type: "bool", Settings: &TagConfig{Bit: ptr(3)}},
		{Name: "in_int16", Address: "7000", Type: "int16", Settings: &TagConfig{Register: "input"}},
		{Name: "in_scaled", Address: "0x1B59", Type: "uint16", Scale: ptr(0.1), Offset: 0, Settings: &TagConfig{Register: "input"}},
		{Name: "in_offset", Address: "7001", Type: "uint16", Scale: ptr(2.0), Offset: -100, Settings: &TagConfig{Register: "input"}},
		{Name: "coil10", Address: "10", Settings: &TagConfig{Register: "coil"}},
		{Name: "coil12", Address: "12", Settings: &TagConfig{Register: "coil"}},
		{Name: "di3", Address: "3", Settings: &TagConfig{Register: "discrete"}},
	}}
	groups = append(groups, misc)

	r := newRig(t, p, &routes.Device{Settings: &Config{ByteOrder: "CDAB"}, Groups: groups})
	r.Open(t)
	for _, order := range []string{"ABCD", "DCBA", "BADC", "CDAB"} {
		vals := r.Poll(t, order)
		for _, c := range typeCases() {
			mustGood(t, vals, order+"_"+c.typ, c.want)
		}
	}
	vals := r.Poll(t, "default")
	for _, c := range typeCases() {
		mustGood(t, vals, "def_"+c.typ, c.want)
	}
	vals = r.Poll(t, "misc")
	mustGood(t, vals, "str", "HELLO-PLC")
	mustGood(t, vals, "str_swapped", "HELLO-PLC")
	mustGood(t, vals, "bit2", true)
	mustGood(t, vals, "bit15", true)
	mustGood(t, vals, "bit3", false)
	mustGood(t, vals, "in_int16", int16(-2))
	mustGood(t, vals, "in_scaled", 25.0)
	mustGood(t, vals, "in_offset", 400.0)
	mustGood(t, vals, "coil10", true)
	mustGood(t, vals, "coil12", false)
	mustGood(t, vals, "di3", true)
}

// TestWriteEveryType writes each type in each order and checks the
// device's registers byte for byte, then reads the value back.
func TestWriteEveryType(t *testing.T) {
	p := newPLC()
	var tags []*routes.Tag
	for oi, order := range []string{"ABCD", "DCBA", "BADC", "CDAB"} {
		for _, c := range typeCases() {
			tags = append(tags, &routes.Tag{Name: order + "_" + c.typ, Address: strconv.Itoa(100*(oi+1) + c.addr), Type: c.typ, Writable: true, Settings: &TagConfig{ByteOrder: order}})
		}
	}
	tags = append(tags,
		&routes.Tag{Name: "str", Address: "600", Type: "string", Length: 4, Writable: true},
		&routes.Tag{Name: "bit4", Address: "610", Type: "bool", Writable: true, Settings: &TagConfig{Bit: ptr(4)}},
		&routes.Tag{Name: "coil", Address: "5", Writable: true, Settings: &TagConfig{Register: "coil"}},
		&routes.Tag{Name: "scaled", Address: "620", Type: "int16", Scale: ptr(0.1), Offset: 20, Writable: true},
		&routes.Tag{Name: "ro", Address: "630", Type: "int16"},
	)
	r := newRig(t, p, &routes.Device{Groups: []*routes.PollGroup{{Name: "all", Tags: tags}}})
	r.Open(t)
	ctx := context.Background()
	for oi, order := range []string{"ABCD", "DCBA", "BADC", "CDAB"} {
		for _, c := range typeCases() {
			name := order + "_" + c.typ
			if err := r.Tr.Write(ctx, name, c.want); err != nil {
				t.Fatalf("write %s: %v", name, err)
			}
			want := permute(order, c.big)
			if got := p.wire(p.holding[:], 100*(oi+1)+c.addr, len(want)/2); string(got) != string(want) {
				t.Errorf("write %s: registers % x, want % x", name, got, want)
			}
		}
	}
	// Writes from MQTT arrive as strings or float64: accepted when exact.
	if err := r.Tr.Write(ctx, "ABCD_int32", "-7"); err != nil {
		t.Fatal(err)
	}
	p.do(func() { p.holding[610] = 0x8001 })
	for _, w := range []struct {
		tag string
		v   any
	}{{"str", "abc"}, {"bit4", true}, {"coil", "true"}, {"scaled", 25.5}} {
		if err := r.Tr.Write(ctx, w.tag, w.v); err != nil {
			t.Fatalf("write %s: %v", w.tag, err)
		}
	}
	if got := string(p.wire(p.holding[:], 600, 4)); got != "abc\x00\x00\x00\x00\x00" {
		t.Errorf("string registers %q", got)
	}
	p.do(func() {
		if p.holding[610] != 0x8011 {
			t.Errorf("bit write: register %#04x, want 0x8011 (other bits kept)", p.holding[610])
		}
		if !p.coils[5] {
			t.Error("coil not set")
		}
		if p.holding[620] != 55 { // (25.5-20)/0.1
			t.Errorf("scaled write: register %d, want 55", p.holding[620])
		}
	})
	vals := r.Poll(t, "all")
	mustGood(t, vals, "ABCD_int32", int32(-7))
	mustGood(t, vals, "str", "abc")
	mustGood(t, vals, "bit4", true)
	mustGood(t, vals, "coil", true)
	mustGood(t, vals, "scaled", 25.5)
	for _, c := range typeCases()[1:] {
		mustGood(t, vals, "DCBA_"+c.typ, c.want)
	}

	for _, bad := range []struct {
		tag  string
		v    any
		want error
	}{
		{"ABCD_int16", 40000, ErrValue},
		{"ABCD_uint16", -1, ErrValue},
		{"ABCD_int32", 1.5e10, ErrValue},
		{"ABCD_uint64", "x", ErrValue},
		{"str", "nine byte", ErrValue},
		{"coil", 2, ErrValue},
		{"ro", 1, ErrReadOnly},
		{"nope", 1, ErrUnknownTag},
	} {
		err := r.Tr.Write(ctx, bad.tag, bad.v)
		if !errors.Is(err, bad.want) {
			t.Errorf("write %s=%v: %v, want %v", bad.tag, bad.v, err, bad.want)
		} else if !strings.Contains(err.Error(), bad.tag) {
			t.Errorf("write %s: error %q does not name the tag", bad.tag, err)
		}
	}
}

// TestMergeRequests counts the device's read requests with merging on and
// off, and checks the 125-register cap.
func TestMergeRequests(t *testing.T) {
	mk := func() []*routes.PollGroup {
		var adj, big []*routes.Tag
		for i := 0; i < 10; i++ {
			adj = append(adj, &routes.Tag{Name: "a" + strconv.Itoa(i), Address: strconv.Itoa(10 + i), Type: "int16"})
		}
		adj = append(adj, &routes.Tag{Name: "far", Address: "500", Type: "int16"},
			&routes.Tag{Name: "c1", Address: "1", Settings: &TagConfig{Register: "coil"}},
			&routes.Tag{Name: "c2", Address: "2", Settings: &TagConfig{Register: "coil"}})
		for i := 0; i < 65; i++ { // 130 registers: two requests at most 125 each
			big = append(big, &routes.Tag{Name: "b" + strconv.Itoa(i), Address: strconv.Itoa(1000 + 2*i), Type: "uint32"})
		}
		return []*routes.PollGroup{{Name: "adj", Tags: adj}, {Name: "big", Tags: big}}
	}
	for _, tc := range []struct {
		merge    bool
		adj, big int
	}{{true, 3, 2}, {false, 13, 65}} {
		p := newPLC()
		for i := 0; i < 10; i++ {
			p.holding[10+i] = uint16(i)
		}
		r := newRig(t, p, &routes.Device{Settings: &Config{MergeRequests: &tc.merge}, Groups: mk()})
		r.Open(t)
		before := p.readCount()
		vals := r.Poll(t, "adj")
		if got := p.readCount() - before; got != tc.adj {
			t.Errorf("merge=%v: group adj took %d reads, want %d", tc.merge, got, tc.adj)
		}
		mustGood(t, vals, "a7", int16(7))
		before = p.readCount()
		r.Poll(t, "big")
		if got := p.readCount() - before; got != tc.big {
			t.Errorf("merge=%v: group big took %d reads, want %d", tc.merge, got, tc.big)
		}
	}
}

// TestBadAddress checks that an address the device refuses spoils only its
// own tag, with an error naming the tag, its address and the exception,
// and that the connection stays up.
func TestBadAddress(t *testing.T) {
	p := newPLC()
	p.bad[201] = true
	p.holding[200], p.holding[202] = 7, 9
	r := newRig(t, p, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{
		{Name: "ok1", Address: "200"}, {Name: "broken", Address: "201"}, {Name: "ok2", Address: "202"},
	}}}})
	r.Open(t)
	vals := r.Poll(t, "g")
	mustGood(t, vals, "ok1", uint16(7))
	mustGood(t, vals, "ok2", uint16(9))
	b := vals["broken"]
	if b.Quality != transports.Bad || !errors.Is(b.Err, ErrException) {
		t.Fatalf("broken tag: %+v", b)
	}
	var ex *ExceptionError
	if !errors.As(b.Err, &ex) || ex.Code != 2 {
		t.Fatalf("broken tag error %v is not exception 2", b.Err)
	}
	for _, want := range []string{`"broken"`, "201", "illegal data address"} {
		if !strings.Contains(b.Err.Error(), want) {
			t.Errorf("error %q lacks %q", b.Err, want)
		}
	}
	if !r.Tr.State().Converged {
		t.Errorf("an exception reply marked the transport unconverged: %v", r.Tr.State().Err)
	}
	if got := r.Proxy.Stats().Accepted; got != 1 {
		t.Errorf("an exception reply caused a reconnect: %d connections", got)
	}
}

// TestConfigErrors checks that bad tags are refused with errors naming the
// tag, the value and the expected form.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		tag  routes.Tag
		want error
		has  []string
	}{
		{routes.Tag{Name: "t1", Address: "DB1.DBW0"}, ErrAddress, []string{`"t1"`, `"DB1.DBW0"`, "0..65535"}},
		{routes.Tag{Name: "t2", Address: "70000"}, ErrAddress, []string{`"t2"`, `"70000"`}},
		{routes.Tag{Name: "t3", Address: "65535", Type: "uint32"}, ErrAddress, []string{`"t3"`, "65535"}},
		{routes.Tag{Name: "t4", Address: "1", Type: "complex"}, ErrConfig, []string{`"t4"`, `"complex"`, "float32"}},
		{routes.Tag{Name: "t5", Address: "1", Settings: &TagConfig{Register: "memory"}}, ErrConfig, []string{`"t5"`, "holding, input, coil or discrete"}},
		{routes.Tag{Name: "t6", Address: "1", Type: "bool"}, ErrConfig, []string{`"t6"`, "bit 0..15"}},
		{routes.Tag{Name: "t7", Address: "1", Type: "string"}, ErrConfig, []string{`"t7"`, "length"}},
		{routes.Tag{Name: "t8", Address: "1", Settings: &TagConfig{ByteOrder: "ACBD"}}, ErrConfig, []string{`"t8"`, `"ACBD"`, "CDAB"}},
		{routes.Tag{Name: "t9", Address: "1", Writable: true, Settings: &TagConfig{Register: "input"}}, ErrConfig, []string{`"t9"`, "read-only"}},
	} {
		_, err := New("dev", &routes.Device{Kind: KindTCP, Address: "127.0.0.1:502",
			Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{&tc.tag}}}})
		if !errors.Is(err, tc.want) {
			t.Errorf("tag %s: error %v, want %v", tc.tag.Name, err, tc.want)
			continue
		}
		for _, h := range tc.has {
			if !strings.Contains(err.Error(), h) {
				t.Errorf("tag %s: error %q lacks %q", tc.tag.Name, err, h)
			}
		}
	}
	if _, err := transports.New(KindTCP, "x", "not a device"); !errors.Is(err, ErrConfig) {
		t.Errorf("factory with a wrong config type: %v", err)
	}
}

// TestUnitID checks the unit id reaches the device.
func TestUnitID(t *testing.T) {
	p := newPLC()
	r := newRig(t, p, &routes.Device{Settings: &Config{UnitID: ptr(17)}, Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "1"}}}}})
	r.Open(t)
	r.Poll(t, "g")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.units[17] == 0 || len(p.units) != 1 {
		t.Errorf("requests per unit id: %v, want only unit 17", p.units)
	}
}

// TestRestartAndReconnect stops the device, sees polls fail with Bad
// values, restarts it and sees the transport reconnect, never holding two
// connections.
func TestRestartAndReconnect(t *testing.T) {
	p := newPLC()
	p.holding[1] = 42
	r := newRig(t, p, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "1"}}}}})
	r.Open(t)
	mustGood(t, r.Poll(t, "g"), "x", uint16(42))

	r.srv.stop()
	vals, err := r.Tr.Poll(context.Background(), "g")
	if err == nil {
		t.Fatal("poll of a stopped device succeeded")
	}
	if !errors.Is(err, ErrIO) && !errors.Is(err, ErrConnect) {
		t.Errorf("poll of a stopped device: %v, want ErrIO or ErrConnect", err)
	}
	if len(vals) != 1 || vals[0].Quality != transports.Bad || vals[0].Err == nil {
		t.Errorf("values of a failed poll: %+v", vals)
	}
	if st := r.Tr.State(); st.Converged || st.Err == nil {
		t.Errorf("state after failure: %+v", st)
	}
	r.WaitConns(t, 0)
	// Down for good: connect fails, naming the address.
	_, err = r.Tr.Poll(context.Background(), "g")
	if !errors.Is(err, ErrConnect) && !errors.Is(err, ErrIO) {
		t.Errorf("poll while down: %v", err)
	}

	r.srv.start()
	p.do(func() { p.holding[1] = 43 })
	mustGood(t, r.Poll(t, "g"), "x", uint16(43))
	if !r.Tr.State().Converged {
		t.Error("not converged after reconnecting")
	}
	if st := r.Proxy.Stats(); st.Current != 1 || st.Peak != 1 {
		t.Errorf("connections now %d, peak %d; want 1 and 1: %+v", st.Current, st.Peak, st)
	}
}

// TestTimeout hangs the device: Open fails within its disclosed activation
// bound with a timeout naming the device, the stale connection is dropped,
// and once the device answers again a poll reconnects.
func TestTimeout(t *testing.T) {
	p := newPLC()
	hang := make(chan struct{})
	p.hang = hang
	dev := &routes.Device{ConnectTimeout: routes.Duration(time.Second), RequestTimeout: routes.Duration(200 * time.Millisecond),
		Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "1"}}}}}
	r := newRig(t, p, dev)
	t.Cleanup(func() {
		p.mu.Lock()
		if p.hang != nil {
			close(p.hang)
			p.hang = nil
		}
		p.mu.Unlock()
	})
	start := time.Now()
	err := r.Tr.Open(r.Owner)
	if took := time.Since(start); took > r.Tr.ActivationBound() {
		t.Errorf("Open took %v, beyond its activation bound %v", took, r.Tr.ActivationBound())
	}
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "plc1") {
		t.Fatalf("Open against a hung device: %v, want ErrTimeout naming the device", err)
	}
	r.WaitConns(t, 0)
	p.mu.Lock()
	close(p.hang)
	p.hang = nil
	p.mu.Unlock()
	p.do(func() { p.holding[1] = 5 })
	mustGood(t, r.Poll(t, "g"), "x", uint16(5))
	if got := r.Proxy.Stats().Accepted; got != 2 {
		t.Errorf("%d connections, want 2 (the timed-out one, then a fresh one)", got)
	}
}

// TestBlackhole checks a silently dropped connection times out and is
// replaced, not reused.
func TestBlackhole(t *testing.T) {
	p := newPLC()
	r := newRig(t, p, &routes.Device{RequestTimeout: routes.Duration(150 * time.Millisecond),
		Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "1"}}}}})
	// A partition hides our close from the device as well as our bytes, so
	// the device holds the dead connection until its own timeout; the
	// promise is that the bridge itself never holds two.
	r.HalfOpen = true
	r.Open(t)
	if err := r.Proxy.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tr.Poll(context.Background(), "g"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("poll through a blackhole: %v, want ErrTimeout", err)
	}
	if r.Tr.Held() != nil {
		t.Fatal("the timed-out connection was kept for reuse")
	}
	if err := r.Proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	r.Poll(t, "g")
	if st := r.Proxy.Stats(); st.Accepted != 2 {
		t.Errorf("accepted %d connections, want 2", st.Accepted)
	}
}

// TestRequestContext: ending the context of a poll interrupts its request
// in flight (the connection is dropped, a late reply cannot pair with the
// next request); a context that ended already sends nothing; and a context
// that ends between polls leaves the connection and later polls under
// another context alone.
func TestRequestContext(t *testing.T) {
	p := newPLC()
	r := newRig(t, p, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "1"}}}}})
	r.Open(t)

	// Polls under one context, which then ends between polls.
	first, cancelFirst := context.WithCancel(context.Background())
	for range 3 {
		if _, err := r.Tr.Poll(first, "g"); err != nil {
			t.Fatal(err)
		}
	}
	cancelFirst()
	sent := r.Proxy.Stats().Conns[0].Requests
	if vals, err := r.Tr.Poll(first, "g"); !errors.Is(err, context.Canceled) || vals[0].Quality != transports.Bad {
		t.Fatalf("poll under an ended context: %+v %v, want context.Canceled", vals, err)
	}
	if got := r.Proxy.Stats().Conns[0].Requests; got != sent {
		t.Fatalf("%d requests sent under an ended context", got-sent)
	}
	second, cancelSecond := context.WithCancel(context.Background())
	defer cancelSecond()
	if _, err := r.Tr.Poll(second, "g"); err != nil {
		t.Fatalf("poll under a new context: %v", err)
	}
	if st := r.Proxy.Stats(); st.Accepted != 1 || st.Current != 1 {
		t.Fatalf("an ended context closed the connection: %+v", st)
	}

	// A request in flight when its context ends.
	done := r.stuckPoll(t, p, second, "g")
	if err := r.Proxy.WaitFor(context.Background(), func(s faultproxy.Stats) bool { return s.Conns[0].Requests > sent+1 }); err != nil {
		t.Fatal(err)
	}
	cancelSecond()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted poll: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request in flight was not interrupted when its context ended")
	}
	r.WaitConns(t, 0)
	p.do(func() { p.hang = nil })
	r.Poll(t, "g")
}
