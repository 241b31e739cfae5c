package opcua

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// space is the test server's namespace. Values live in a map behind its
// own mutex: the library's node namespace swaps a node's value function on
// every write without a lock, which races with the subscription goroutines.
type space struct {
	srv *server.Server
	id  uint16

	mu   sync.Mutex
	vals map[string]*ua.DataValue
	ro   map[string]bool
	root *server.Node
}

func (s *space) Name() string                        { return "urn:leasebridge:test:plc" }
func (s *space) AddNode(n *server.Node) *server.Node { return n }
func (s *space) Node(*ua.NodeID) *server.Node        { return nil }
func (s *space) Objects() *server.Node               { return s.root }
func (s *space) Root() *server.Node                  { return s.root }
func (s *space) ID() uint16                          { return s.id }
func (s *space) SetID(id uint16)                     { s.id = id }
func (s *space) Browse(*ua.BrowseDescription) *ua.BrowseResult {
	return &ua.BrowseResult{StatusCode: ua.StatusBadNodeIDUnknown}
}

func (s *space) Attribute(id *ua.NodeID, attr ua.AttributeID) *ua.DataValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	dv, ok := s.vals[id.String()]
	switch {
	case !ok:
		return &ua.DataValue{EncodingMask: ua.DataValueStatusCode | ua.DataValueServerTimestamp, Status: ua.StatusBadNodeIDUnknown, ServerTimestamp: time.Now()}
	case attr != ua.AttributeIDValue:
		return &ua.DataValue{EncodingMask: ua.DataValueStatusCode, Status: ua.StatusBadAttributeIDInvalid}
	}
	c := *dv
	return &c
}

func (s *space) SetAttribute(id *ua.NodeID, attr ua.AttributeID, val *ua.DataValue) ua.StatusCode {
	s.mu.Lock()
	old, ok := s.vals[id.String()]
	switch {
	case !ok:
		s.mu.Unlock()
		return ua.StatusBadNodeIDUnknown
	case attr != ua.AttributeIDValue:
		s.mu.Unlock()
		return ua.StatusBadAttributeIDInvalid
	case s.ro[id.String()]:
		s.mu.Unlock()
		return ua.StatusBadNotWritable
	case val == nil || val.Value == nil || val.Value.Type() != old.Value.Type():
		s.mu.Unlock()
		return ua.StatusBadTypeMismatch
	}
	s.vals[id.String()] = stamp(val.Value)
	s.mu.Unlock()
	s.srv.ChangeNotification(id)
	return ua.StatusOK
}

func stamp(v *ua.Variant) *ua.DataValue {
	return &ua.DataValue{EncodingMask: ua.DataValueValue | ua.DataValueSourceTimestamp | ua.DataValueServerTimestamp,
		Value: v, SourceTimestamp: time.Now().Truncate(time.Millisecond), ServerTimestamp: time.Now()}
}

// set stores a value (and its variant type) and notifies subscribers.
func (s *space) set(name string, v any) {
	id := ua.NewStringNodeID(s.id, name)
	s.mu.Lock()
	s.vals[id.String()] = stamp(ua.MustVariant(v))
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		srv.ChangeNotification(id)
	}
}

func (s *space) get(name string) *ua.DataValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[ua.NewStringNodeID(s.id, name).String()]
}

// uaServer is a gopcua server on a fixed port, so a test can restart it.
type uaServer struct {
	t    *testing.T
	port int
	// proxy counts the connections to the server. The server also
	// advertises the proxy's URL: it answers GetEndpoints only for an
	// endpoint URL it lists, and the transport asks with the URL it dials.
	proxy *faultproxy.Proxy
	space *space
	srv   *server.Server
	opts  []server.Option
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startServer(t *testing.T, extra ...server.Option) *uaServer {
	t.Helper()
	u := &uaServer{t: t, port: freePort(t), space: &space{vals: map[string]*ua.DataValue{}, ro: map[string]bool{}}}
	px, err := faultproxy.Start(context.Background(), "127.0.0.1:"+strconv.Itoa(u.port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	u.proxy = px
	_, pxPort, _ := net.SplitHostPort(px.Addr())
	pp, _ := strconv.Atoi(pxPort)
	u.space.root = server.NewNode(ua.NewNumericNodeID(1, 85), server.Attributes{}, nil, nil)
	u.opts = append([]server.Option{
		server.EndPoint("127.0.0.1", u.port),
		server.EndPoint("127.0.0.1", pp),
		server.EnableSecurity("None", ua.MessageSecurityModeNone),
		server.EnableAuthMode(ua.UserTokenTypeAnonymous),
	}, extra...)
	u.start()
	t.Cleanup(u.stop)
	return u
}

func (u *uaServer) start() {
	u.t.Helper()
	srv := server.New(u.opts...)
	u.space.mu.Lock()
	u.space.srv = srv
	u.space.mu.Unlock()
	if idx := srv.AddNamespace(u.space); idx != 1 {
		u.t.Fatalf("namespace index %d, want 1", idx)
	}
	if err := srv.Start(context.Background()); err != nil {
		u.t.Fatal(err)
	}
	u.srv = srv
	_ = u.proxy.SetMode(faultproxy.Pass)
}

func (u *uaServer) stop() {
	// Reset the connections first: the server's Close waits up to 10 s for
	// every channel's reader, which only a closed socket ends.
	_ = u.proxy.SetMode(faultproxy.Reset)
	if u.srv != nil {
		_ = u.srv.Close()
		u.srv = nil
	}
}

// subscriptionIDs lists the subscriptions the server holds.
func (u *uaServer) subscriptionIDs() []uint32 {
	ss := u.srv.SubscriptionService
	ss.Mu.Lock()
	defer ss.Mu.Unlock()
	var ids []uint32
	for id := range ss.Subs {
		ids = append(ids, id)
	}
	return ids
}

type rig struct {
	srv   *uaServer
	proxy *faultproxy.Proxy
	tr    *Transport
	owner context.Context
	stop  context.CancelFunc
	// halfOpen excuses a test that partitions the link: the server keeps
	// a connection the bridge has already closed.
	halfOpen bool
}

// newRig builds a transport reaching srv through its proxy; own gives it
// a proxy of its own instead (whose URL the server does not advertise).
func newRig(t *testing.T, srv *uaServer, dev *routes.Device, own ...bool) *rig {
	t.Helper()
	px := srv.proxy
	if len(own) > 0 && own[0] {
		var err error
		if px, err = faultproxy.Start(context.Background(), "127.0.0.1:"+strconv.Itoa(srv.port)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
	}
	dev.Kind = routes.KindOPCUA
	dev.Address = "opc.tcp://" + px.Addr()
	tr, err := New("ua1", dev)
	if err != nil {
		t.Fatal(err)
	}
	owner, stop := context.WithCancel(context.Background())
	r := &rig{srv: srv, proxy: px, tr: tr, owner: owner, stop: stop}
	t.Cleanup(func() {
		stop()
		_ = tr.Close(context.Background())
		// The endpoint query and the session use one connection after the
		// other, never two at once.
		if peak := px.Peak(); peak > 1 && !r.halfOpen {
			t.Errorf("server saw %d concurrent connections, want at most 1", peak)
		}
	})
	return r
}

func (r *rig) open(t *testing.T) {
	t.Helper()
	if err := r.tr.Open(r.owner); err != nil {
		t.Fatalf("Open: %v", err)
	}
}

func (r *rig) poll(t *testing.T, group string) map[string]transports.Value {
	t.Helper()
	vals, err := r.tr.Poll(context.Background(), group)
	if err != nil {
		t.Fatalf("Poll %s: %v", group, err)
	}
	m := map[string]transports.Value{}
	for _, v := range vals {
		m[v.Tag] = v
	}
	return m
}

// waitConns waits until the proxy holds n connections.
func (r *rig) waitConns(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.proxy.WaitFor(ctx, func(s faultproxy.Stats) bool { return s.Current == n }); err != nil {
		t.Fatalf("waiting for %d connections: %+v", n, r.proxy.Stats())
	}
}

func ptr[T any](v T) *T { return &v }

func mustGood(t *testing.T, vals map[string]transports.Value, name string, want any) {
	t.Helper()
	v, ok := vals[name]
	if !ok {
		t.Fatalf("tag %s missing", name)
	}
	if v.Quality != transports.Good || v.Err != nil || v.Timestamp.IsZero() {
		t.Fatalf("tag %s: quality %s, err %v, time %v", name, v.Quality, v.Err, v.Timestamp)
	}
	if fmt.Sprintf("%T %v", v.Value, v.Value) != fmt.Sprintf("%T %v", want, want) {
		t.Errorf("tag %s = %T %v, want %T %v", name, v.Value, v.Value, want, want)
	}
}
