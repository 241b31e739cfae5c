// Package uatest is an in-process OPC UA server for tests: the gopcua
// server with a namespace whose values sit behind their own mutex (the
// library's node namespace races under -race), reached through a
// connection-counting fault proxy.
package uatest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
)

// space is the test server's namespace. Values live in a map behind its
// own mutex: the library's node namespace swaps a node's value function on
// every write without a lock, which races with the subscription goroutines.
type Space struct {
	srv *server.Server
	id  uint16

	mu   sync.Mutex
	vals map[string]*ua.DataValue
	ro   map[string]bool
	root *server.Node
}

func (s *Space) Name() string                        { return "urn:leasebridge:test:plc" }
func (s *Space) AddNode(n *server.Node) *server.Node { return n }
func (s *Space) Node(*ua.NodeID) *server.Node        { return nil }
func (s *Space) Objects() *server.Node               { return s.root }
func (s *Space) Root() *server.Node                  { return s.root }
func (s *Space) ID() uint16                          { return s.id }
func (s *Space) SetID(id uint16)                     { s.id = id }
func (s *Space) Browse(*ua.BrowseDescription) *ua.BrowseResult {
	return &ua.BrowseResult{StatusCode: ua.StatusBadNodeIDUnknown}
}

func (s *Space) Attribute(id *ua.NodeID, attr ua.AttributeID) *ua.DataValue {
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

func (s *Space) SetAttribute(id *ua.NodeID, attr ua.AttributeID, val *ua.DataValue) ua.StatusCode {
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
func (s *Space) Set(name string, v any) {
	id := ua.NewStringNodeID(s.id, name)
	s.mu.Lock()
	s.vals[id.String()] = stamp(ua.MustVariant(v))
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		srv.ChangeNotification(id)
	}
}

func (s *Space) Get(name string) *ua.DataValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[ua.NewStringNodeID(s.id, name).String()]
}

// uaServer is a gopcua server on a fixed port, so a test can restart it.
type Server struct {
	t    testing.TB
	Port int
	// proxy counts the connections to the server. The server also
	// advertises the proxy's URL: it answers GetEndpoints only for an
	// endpoint URL it lists, and the transport asks with the URL it dials.
	Proxy *faultproxy.Proxy
	Space *Space
	Srv   *server.Server
	opts  []server.Option
}

// FreePort returns a loopback port free right now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func Start(t testing.TB, extra ...server.Option) *Server {
	t.Helper()
	u := &Server{t: t, Port: FreePort(t), Space: &Space{vals: map[string]*ua.DataValue{}, ro: map[string]bool{}}}
	px, err := faultproxy.Start(context.Background(), "127.0.0.1:"+strconv.Itoa(u.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	u.Proxy = px
	_, pxPort, _ := net.SplitHostPort(px.Addr())
	pp, _ := strconv.Atoi(pxPort)
	u.Space.root = server.NewNode(ua.NewNumericNodeID(1, 85), server.Attributes{}, nil, nil)
	u.opts = append([]server.Option{
		server.EndPoint("127.0.0.1", u.Port),
		server.EndPoint("127.0.0.1", pp),
		server.EnableSecurity("None", ua.MessageSecurityModeNone),
		server.EnableAuthMode(ua.UserTokenTypeAnonymous),
	}, extra...)
	u.Start()
	t.Cleanup(u.Stop)
	return u
}

func (u *Server) Start() {
	u.t.Helper()
	srv := server.New(u.opts...)
	u.Space.mu.Lock()
	u.Space.srv = srv
	u.Space.mu.Unlock()
	if idx := srv.AddNamespace(u.Space); idx != 1 {
		u.t.Fatalf("namespace index %d, want 1", idx)
	}
	if err := srv.Start(context.Background()); err != nil {
		u.t.Fatal(err)
	}
	u.Srv = srv
	_ = u.Proxy.SetMode(faultproxy.Pass)
}

func (u *Server) Stop() {
	// Reset the connections first: the server's Close waits up to 10 s for
	// every channel's reader, which only a closed socket ends.
	_ = u.Proxy.SetMode(faultproxy.Reset)
	if u.Srv != nil {
		_ = u.Srv.Close()
		u.Srv = nil
	}
}

// subscriptionIDs lists the subscriptions the server holds.
func (u *Server) SubscriptionIDs() []uint32 {
	ss := u.Srv.SubscriptionService
	ss.Mu.Lock()
	defer ss.Mu.Unlock()
	var ids []uint32
	for id := range ss.Subs {
		ids = append(ids, id)
	}
	return ids
}

// SetReadOnly makes a node refuse writes with BadNotWritable.
func (s *Space) SetReadOnly(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ro[ua.NewStringNodeID(s.id, name).String()] = true
}
