package opcua

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/opcua/uatest"
)

var typed = []struct {
	node string
	v    any
}{
	{"b", true}, {"i8", int8(-100)}, {"u8", uint8(200)}, {"i16", int16(-12345)}, {"u16", uint16(54321)},
	{"i32", int32(-123456789)}, {"u32", uint32(3123456789)}, {"i64", int64(math.MinInt64)},
	{"u64", uint64(math.MaxUint64)}, {"f32", float32(-12.625)}, {"f64", 1234.5678}, {"s", "hello ua"},
}

func fill(s *uatest.Space) {
	for _, n := range typed {
		s.Set(n.node, n.v)
	}
	s.Set("scaled", int16(250))
	s.Set("ro", int32(1))
	s.SetReadOnly("ro")
}

func typedTags(writable bool) []*routes.Tag {
	var tags []*routes.Tag
	for _, n := range typed {
		tags = append(tags, &routes.Tag{Name: n.node, Address: "ns=1;s=" + n.node, Writable: writable})
	}
	return tags
}

func TestPollEveryType(t *testing.T) {
	srv := uatest.Start(t)
	fill(srv.Space)
	tags := append(typedTags(false),
		&routes.Tag{Name: "scaled", Address: "ns=1;s=scaled", Scale: ptr(0.1), Offset: 1},
		&routes.Tag{Name: "missing", Address: "ns=1;s=nope"})
	r := newRig(t, srv, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: tags}}})
	r.Open(t)
	v := r.Poll(t, "g")
	for _, n := range typed {
		mustGood(t, v, n.node, n.v)
		if want := srv.Space.Get(n.node).SourceTimestamp; !v[n.node].Timestamp.Equal(want) {
			t.Errorf("%s: timestamp %v, want the source timestamp %v", n.node, v[n.node].Timestamp, want)
		}
	}
	mustGood(t, v, "scaled", 26.0)
	m := v["missing"]
	if m.Quality != transports.Bad || !errors.Is(m.Err, ua.StatusBadNodeIDUnknown) || !errors.Is(m.Err, ErrStatus) ||
		!strings.Contains(m.Err.Error(), `"missing"`) || !strings.Contains(m.Err.Error(), "ns=1;s=nope") {
		t.Errorf("unknown node: %+v", m)
	}
	if !r.Tr.State().Converged {
		t.Errorf("state %+v", r.Tr.State())
	}
}

// TestChunkByMaxNodesPerRead polls more tags than the server's
// MaxNodesPerRead (32 on the gopcua server).
func TestChunkByMaxNodesPerRead(t *testing.T) {
	srv := uatest.Start(t)
	var tags []*routes.Tag
	for i := 0; i < 70; i++ {
		srv.Space.Set(fmt.Sprint("n", i), int32(i))
		tags = append(tags, &routes.Tag{Name: fmt.Sprint("n", i), Address: fmt.Sprintf("ns=1;s=n%d", i)})
	}
	r := newRig(t, srv, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: tags}}})
	r.Open(t)
	if r.Tr.Held().maxRead != 32 {
		t.Fatalf("MaxNodesPerRead %d, want the server's 32", r.Tr.Held().maxRead)
	}
	r.Tr.mu.Lock()
	before := r.Tr.reads
	r.Tr.mu.Unlock()
	v := r.Poll(t, "g")
	for i := 0; i < 70; i++ {
		mustGood(t, v, fmt.Sprint("n", i), int32(i))
	}
	r.Tr.mu.Lock()
	defer r.Tr.mu.Unlock()
	if got := r.Tr.reads - before; got != 3 {
		t.Errorf("%d Read requests for 70 nodes, want 3", got)
	}
}

func TestWrite(t *testing.T) {
	srv := uatest.Start(t)
	fill(srv.Space)
	tags := append(typedTags(true),
		&routes.Tag{Name: "scaled", Address: "ns=1;s=scaled", Scale: ptr(0.1), Offset: 1, Writable: true},
		&routes.Tag{Name: "ro", Address: "ns=1;s=ro", Type: "int32", Writable: true},
		&routes.Tag{Name: "typed", Address: "ns=1;s=i16", Type: "int16", Writable: true},
		&routes.Tag{Name: "notw", Address: "ns=1;s=u8"})
	r := newRig(t, srv, &routes.Device{Groups: []*routes.PollGroup{{Name: "g", Tags: tags}}})
	r.Open(t)
	ctx := context.Background()
	writes := map[string]struct{ in, want any }{
		"b": {"false", false}, "i8": {-5, int8(-5)}, "u8": {7.0, uint8(7)}, "i16": {"-300", int16(-300)},
		"u16": {uint64(65535), uint16(65535)}, "i32": {-1, int32(-1)}, "u32": {"4000000000", uint32(4000000000)},
		"i64": {"9223372036854775807", int64(math.MaxInt64)}, "u64": {"18446744073709551615", uint64(math.MaxUint64)},
		"f32": {2.5, float32(2.5)}, "f64": {"-0.125", -0.125}, "s": {"written", "written"},
		"scaled": {11.5, int16(105)},
	}
	for name, w := range writes {
		if err := r.Tr.Write(ctx, name, w.in); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		if got := srv.Space.Get(name).Value.Value(); fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", w.want, w.want) {
			t.Errorf("write %s=%v: server holds %T %v, want %T %v", name, w.in, got, got, w.want, w.want)
		}
	}
	v := r.Poll(t, "g")
	mustGood(t, v, "scaled", 11.5)
	mustGood(t, v, "s", "written")
	for _, bad := range []struct {
		tag  string
		v    any
		want error
	}{
		{"i8", 200, ErrValue}, {"u16", -1, ErrValue}, {"u32", 1.5e10, ErrValue}, {"b", "yes", ErrValue},
		{"s", 5, ErrValue}, {"ro", 1, ua.StatusBadNotWritable}, {"notw", 1, ErrReadOnly}, {"nope", 1, ErrUnknownTag},
	} {
		err := r.Tr.Write(ctx, bad.tag, bad.v)
		if !errors.Is(err, bad.want) || !strings.Contains(err.Error(), bad.tag) {
			t.Errorf("write %s=%v: %v, want %v naming the tag", bad.tag, bad.v, err, bad.want)
		}
	}
	if err := r.Tr.Write(ctx, "typed", 12); err != nil {
		t.Fatal(err)
	}
	if got := srv.Space.Get("i16").Value.Value(); got != int16(12) {
		t.Errorf("typed write stored %T %v", got, got)
	}
	if st := r.Proxy.Stats(); st.Current != 1 {
		t.Errorf("refused writes cost a reconnect: %+v", st)
	}
}

// collector gathers subscription notifications.
type collector struct {
	mu   sync.Mutex
	vals []transports.Value
	ch   chan struct{}
}

func newCollector(tr *Transport) *collector {
	c := &collector{ch: make(chan struct{}, 1)}
	tr.SetNotify(func(_ string, v transports.Value) {
		c.mu.Lock()
		c.vals = append(c.vals, v)
		c.mu.Unlock()
		select {
		case c.ch <- struct{}{}:
		default:
		}
	})
	return c
}

// wait waits for a notification of tag with value want and returns the
// values of tag seen before it.
func (c *collector) wait(t *testing.T, tag string, want any) []any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		var seen []any
		for _, v := range c.vals {
			if v.Tag != tag {
				continue
			}
			if v.Quality == transports.Good && fmt.Sprint(v.Value) == fmt.Sprint(want) {
				c.mu.Unlock()
				return seen
			}
			seen = append(seen, v.Value)
		}
		c.mu.Unlock()
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("no notification of %s = %v; saw %v", tag, want, seen)
		}
	}
}

func subDevice() *routes.Device {
	return &routes.Device{Groups: []*routes.PollGroup{{
		Name: "sub", Mode: "subscribe", Interval: routes.Duration(20 * time.Millisecond), PublishingInterval: routes.Duration(20 * time.Millisecond),
		Tags: []*routes.Tag{
			{Name: "temp", Address: "ns=1;s=temp", Deadband: 5},
			{Name: "count", Address: "ns=1;s=count"},
		},
	}}}
}

func TestSubscribeAndDeadband(t *testing.T) {
	srv := uatest.Start(t)
	srv.Space.Set("temp", 20.0)
	srv.Space.Set("count", int32(0))
	r := newRig(t, srv, subDevice())
	c := newCollector(r.Tr)
	r.Open(t)
	c.wait(t, "temp", 20.0)
	c.wait(t, "count", int32(0))
	srv.Space.Set("temp", 22.0) // within the deadband of 5
	srv.Space.Set("count", int32(1))
	c.wait(t, "count", int32(1))
	srv.Space.Set("temp", 30.0)
	for _, v := range c.wait(t, "temp", 30.0) {
		if v != 20.0 {
			t.Errorf("a value within the deadband was delivered: %v", v)
		}
	}
	// A change equal to the deadband is not delivered (transports.Moved).
	srv.Space.Set("temp", 35.0)
	srv.Space.Set("count", int32(2))
	c.wait(t, "count", int32(2))
	srv.Space.Set("temp", 35.5)
	for _, v := range c.wait(t, "temp", 35.5) {
		if v == 35.0 {
			t.Errorf("a change equal to the deadband was delivered: %v", v)
		}
	}
	v := r.Poll(t, "sub")
	mustGood(t, v, "temp", 35.5)
	mustGood(t, v, "count", int32(2))
	if ids := srv.SubscriptionIDs(); len(ids) != 1 {
		t.Errorf("server holds %d subscriptions, want 1", len(ids))
	}
}

// TestWatchdogRecreatesLostSubscription deletes the subscription on the
// server behind the client's back: the watchdog must notice a change that
// is never notified and recreate it, on the same session.
func TestWatchdogRecreatesLostSubscription(t *testing.T) {
	srv := uatest.Start(t)
	srv.Space.Set("temp", 20.0)
	srv.Space.Set("count", int32(0))
	r := newRig(t, srv, subDevice())
	c := newCollector(r.Tr)
	r.Open(t)
	c.wait(t, "count", int32(0))
	ids := srv.SubscriptionIDs()
	if len(ids) != 1 {
		t.Fatalf("server subscriptions %v", ids)
	}
	srv.Srv.SubscriptionService.DeleteSubscription(ids[0])
	srv.Space.Set("count", int32(42))
	c.wait(t, "count", int32(42))
	// The new subscription may deliver before the watchdog counts it.
	var recreated, sessions int
	for deadline := time.Now().Add(10 * time.Second); ; {
		r.Tr.mu.Lock()
		recreated, sessions = r.Tr.recreated, r.Tr.sessions
		r.Tr.mu.Unlock()
		if recreated >= 1 || time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	if recreated < 1 || sessions != 1 {
		t.Errorf("recreated %d subscriptions over %d sessions; want at least 1 over 1", recreated, sessions)
	}
	if now := srv.SubscriptionIDs(); len(now) != 1 {
		t.Errorf("server subscriptions after recreation: %v", now)
	}
	srv.Space.Set("count", int32(43))
	c.wait(t, "count", int32(43))
}

// TestServerRestart stops the server: polls fail with Bad values; after
// the restart the transport reconnects and the watchdog resubscribes,
// never holding two connections.
func TestServerRestart(t *testing.T) {
	srv := uatest.Start(t)
	srv.Space.Set("temp", 20.0)
	srv.Space.Set("count", int32(0))
	dev := subDevice()
	dev.Groups = append(dev.Groups, &routes.PollGroup{Name: "p", Tags: []*routes.Tag{{Name: "pc", Address: "ns=1;s=count"}}})
	r := newRig(t, srv, dev)
	c := newCollector(r.Tr)
	r.Open(t)
	c.wait(t, "count", int32(0))
	r.WaitConns(t, 1)
	srv.Stop()
	r.WaitConns(t, 0)
	vals, err := r.Tr.Poll(context.Background(), "p")
	if err == nil || vals[0].Quality != transports.Bad {
		t.Fatalf("poll of a stopped server: %+v %v", vals, err)
	}
	if !errors.Is(err, ErrConnect) && !errors.Is(err, ErrIO) {
		t.Errorf("poll of a stopped server: %v", err)
	}
	if r.Tr.State().Converged {
		t.Error("converged while the server is down")
	}
	srv.Start()
	srv.Space.Set("count", int32(5))
	c.wait(t, "count", int32(5))
	mustGood(t, r.Poll(t, "p"), "pc", int32(5))
	if st := r.Proxy.Stats(); st.Peak > 1 {
		t.Errorf("server saw %d concurrent connections", st.Peak)
	}
}

func TestTimeoutDropsSession(t *testing.T) {
	srv := uatest.Start(t)
	srv.Space.Set("x", int32(1))
	dev := &routes.Device{ConnectTimeout: routes.Duration(time.Second), RequestTimeout: routes.Duration(300 * time.Millisecond),
		CloseTimeout: routes.Duration(400 * time.Millisecond),
		Groups:       []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "ns=1;s=x"}}}}}
	r := newRig(t, srv, dev)
	r.HalfOpen = true
	r.Open(t)
	r.Poll(t, "g")
	if err := r.Proxy.SetMode(faultproxy.Blackhole); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Tr.Poll(context.Background(), "g"); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "ua1") {
		t.Fatalf("poll through a blackhole: %v, want ErrTimeout naming the device", err)
	}
	// The proxy hides our close inside the blackhole, as a partition
	// would; what the transport owes is to have dropped the session.
	if r.Tr.Held() != nil || r.Tr.State().Converged {
		t.Fatal("the timed-out session was kept")
	}
}

// TestWatchdogEndsWithOwner: the subscription watchdog stops when the
// owner context ends, so nothing reconnects behind it (the conformance
// suite checks the session itself closes within the close bound).
func TestWatchdogEndsWithOwner(t *testing.T) {
	srv := uatest.Start(t)
	srv.Space.Set("temp", 1.0)
	srv.Space.Set("count", int32(0))
	r := newRig(t, srv, subDevice())
	r.Open(t)
	r.WaitConns(t, 1)
	r.Stop()
	stopped := make(chan struct{})
	go func() { r.Tr.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog still runs 10s after the owner context ended")
	}
	r.WaitConns(t, 0)
	if got := r.Proxy.Stats().Accepted; got != 1 {
		t.Errorf("%d connections; the transport reconnected after its owner context ended", got)
	}
	if _, err := r.Tr.Poll(context.Background(), "sub"); !errors.Is(err, ErrClosed) {
		t.Errorf("poll after the owner context ended: %v", err)
	}
}

// TestClientIdentityPersists checks the client certificate is created
// once and then reused, with a private key only its owner can read.
func TestClientIdentityPersists(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "pki", "client.crt"), filepath.Join(dir, "pki", "client.key")
	der1, k1, err := clientIdentity(cert, key, "urn:leasebridge:client")
	if err != nil {
		t.Fatal(err)
	}
	der2, k2, err := clientIdentity(cert, key, "urn:leasebridge:client")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(der1, der2) || !k1.Equal(k2) {
		t.Error("the client identity changed between loads")
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi, err)
	}
	if err := os.WriteFile(cert, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := clientIdentity(cert, key, "urn:leasebridge:client"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), cert) {
		t.Errorf("corrupt certificate: %v", err)
	}
	if err := os.Remove(cert); err != nil {
		t.Fatal(err)
	}
	// Only one of the pair present: refuse rather than replace the key.
	if _, _, err := clientIdentity(cert, key, "urn:leasebridge:client"); !errors.Is(err, ErrConfig) {
		t.Errorf("certificate missing, key present: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		dev  routes.Device
		want error
		has  string
	}{
		{routes.Device{Address: "opc.tcp://h:4840", Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "t1", Address: "DB1.DBW0"}}}}}, ErrAddress, `tag "t1": address "DB1.DBW0": want a node id`},
		{routes.Device{Address: "opc.tcp://h:4840", Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "t2", Address: "ns=2;s=x", Type: "decimal"}}}}}, ErrConfig, `"decimal"`},
		{routes.Device{Address: "opc.tcp://h:4840", Groups: []*routes.PollGroup{{Name: "g", Mode: "stream"}}}, ErrConfig, `"stream"`},
		{routes.Device{Address: "tcp://h:4840"}, ErrConfig, "opc.tcp://"},
		{routes.Device{Address: "opc.tcp://h:4840", Settings: &Config{SecurityPolicy: "Basic128Rsa15"}}, ErrConfig, "Basic256Sha256"},
		{routes.Device{Address: "opc.tcp://h:4840", Settings: &Config{SecurityPolicy: "Basic256Sha256"}}, ErrConfig, "cert_file"},
		{routes.Device{Address: "opc.tcp://h:4840", Settings: &Config{SecurityMode: "Sign"}}, ErrConfig, "security_policy None with security_mode Sign: None goes with None"},
		{routes.Device{Address: "opc.tcp://h:4840", Settings: &Config{SecurityPolicy: "Basic256Sha256", SecurityMode: "Encrypt", CertFile: "c", KeyFile: "k"}}, ErrConfig, `security_mode "Encrypt"`},
		{routes.Device{Address: "opc.tcp://h:4840", Settings: &Config{Credentials: routes.Credentials{Username: "u"}}}, ErrConfig, "password_file"},
		{routes.Device{Address: "opc.tcp://h:4840", Settings: &struct{}{}}, ErrConfig, "want *opcua.Config"},
	} {
		tc.dev.Kind = Kind
		_, err := New("dev", &tc.dev)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.has) {
			t.Errorf("%+v: %v, want %v containing %q", tc.dev, err, tc.want, tc.has)
		}
	}
}

// TestEveryTagType: the node types cover every type of the one list.
func TestEveryTagType(t *testing.T) {
	for _, typ := range routes.TagTypes {
		if _, ok := typeIDs[typ]; !ok {
			t.Errorf("type %s has no OPC UA built-in type", typ)
		}
	}
	if len(typeIDs) != len(routes.TagTypes) {
		t.Errorf("%d OPC UA types for %d tag types", len(typeIDs), len(routes.TagTypes))
	}
}
