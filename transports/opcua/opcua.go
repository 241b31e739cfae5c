// Package opcua is the OPC UA client transport, built on
// github.com/gopcua/opcua. A poll group is read with Read requests chunked
// by the server's MaxNodesPerRead; a subscribe group is a subscription
// with its own publishing interval whose monitored items sample at the
// group's interval and carry each tag's absolute deadband (also applied
// here, for servers that ignore the filter). A watchdog recreates a
// subscription the server lost and reconnects a dropped session.
//
// Security is None or Basic256Sha256 (Sign or SignAndEncrypt) with a
// client certificate kept in cert_file/key_file and created there on first
// use; the user is anonymous or a user name with a password from a file or
// an environment variable. The library's own reconnection is off: the
// transport reconnects itself, only under the owner context, so the
// server never sees a second session from this bridge.
//
// The configuration is a *routes.Device of kind opcua whose Settings
// are a *Config (config.go).
package opcua

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/leasebridge/leasebridge/internal/redact"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// Sentinel errors every device transport has (transports.DeviceErrors),
// each reading "opcua: ...".
var (
	errs = transports.NewDeviceErrors("opcua")

	ErrConfig, ErrClosed, ErrNotOpen, ErrConnect, ErrTimeout     = errs.Config, errs.Closed, errs.NotOpen, errs.Connect, errs.Timeout
	ErrIO, ErrUnknownGroup, ErrUnknownTag, ErrReadOnly, ErrValue = errs.IO, errs.UnknownGroup, errs.UnknownTag, errs.ReadOnly, errs.Value
)

// Sentinel errors of this package alone. Every error the package returns
// wraps one of these or of the shared ones above (or a context error) and
// names the device, tag or node at fault.
var (
	// ErrAddress reports a tag address that is not a node id.
	ErrAddress = errors.New("opcua: invalid node id")
	// ErrStatus reports a node or service the server answered with a bad
	// status code; the session stays open.
	ErrStatus = errors.New("opcua: bad status")
)

// Security policies this transport speaks.
const (
	PolicyNone           = "None"
	PolicyBasic256Sha256 = "Basic256Sha256"
)

type tag struct {
	name     string
	address  string
	node     *ua.NodeID
	kind     ua.TypeID // from the configured type; 0 means learn it from the node
	scale    *float64
	offset   float64
	deadband float64
}

type group struct {
	name       string
	subscribe  bool
	sampling   time.Duration
	publishing time.Duration
	tags       []*tag
}

// Transport is one OPC UA server session. Its methods are safe for
// concurrent use; session changes and the requests of Poll, Write and the
// watchdog are serialized. The embedded Conn holds the session's
// owner-bound lifecycle.
type Transport struct {
	*transports.Conn[*session]
	name     string
	endpoint string
	policy   string
	mode     ua.MessageSecurityMode
	certFile string
	keyFile  string
	creds    routes.Credentials

	connectTimeout, requestTimeout, closeTimeout time.Duration

	*transports.Catalog[*group, *tag]
	subs []*group

	// mu guards the fields below; it is never held during I/O.
	mu        sync.Mutex
	cache     map[string]transports.Value // last delivered value of subscribed tags
	kinds     map[string]ua.TypeID        // node types learned by reading
	endpoints []*ua.EndpointDescription
	notify    func(group string, v transports.Value)
	reads     int // Read requests sent
	recreated int // subscriptions the watchdog recreated
	sessions  int // sessions created

	wg sync.WaitGroup
}

// session is one connected client and its subscriptions.
type session struct {
	c       *opcua.Client
	maxRead int
	subs    map[string]*sub
	ctx     context.Context // ends when the session is dropped
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// sub is one live subscription of a subscribe group.
type sub struct {
	g         *group
	s         *opcua.Subscription
	keepalive time.Duration      // the server answers a publish at least this often
	ctx       context.Context    // ends the receiving goroutine
	stop      context.CancelFunc // called when the subscription is replaced
	// The fields below are guarded by Transport.mu.
	lastData time.Time
	lost     error // set when the server reported the subscription gone
	suspect  bool  // the last probe found a change that was never notified
}

// New builds a transport for an opcua device, checking every tag.
func New(name string, dev *routes.Device) (*Transport, error) {
	if err := transports.CheckKind(name, dev, Kind, errs); err != nil {
		return nil, err
	}
	cfg, err := settings(dev)
	if err != nil {
		return nil, fmt.Errorf("%w: device %q: %w", ErrConfig, name, err)
	}
	if !strings.HasPrefix(dev.Address, scheme) {
		return nil, fmt.Errorf("%w: device %q: "+addressRule, ErrConfig, name, redact.URL(dev.Address))
	}
	t := &Transport{
		name: name, endpoint: dev.Address, certFile: cfg.CertFile, keyFile: cfg.KeyFile, creds: cfg.Credentials,
		cache: map[string]transports.Value{}, kinds: map[string]ua.TypeID{},
	}
	t.connectTimeout, t.requestTimeout, t.closeTimeout = dev.Timeouts()
	t.Conn = transports.NewConn(transports.ConnConfig[*session]{
		Name: name, Where: redact.URL(t.endpoint),
		ConnectTimeout: t.connectTimeout, RequestTimeout: t.requestTimeout, CloseTimeout: t.closeTimeout,
		Errors: errs,
		Dial:   t.connect,
		Hangup: t.closeSession,
		Alive:  func(s *session) bool { return s.c.State() == opcua.Connected },
	})
	var problems []problem
	if t.policy, t.mode, problems = cfg.security(); len(problems) > 0 {
		return nil, fmt.Errorf("%w: device %q: %s", ErrConfig, name, fmt.Sprintf(problems[0].format, problems[0].args...))
	}
	if t.policy != PolicyNone && (t.certFile == "" || t.keyFile == "") {
		return nil, fmt.Errorf("%w: device %q: security_policy %s needs cert_file and key_file (created on first use if both are absent)", ErrConfig, name, t.policy)
	}
	if t.creds.Username != "" && t.creds.PasswordFile == "" && t.creds.PasswordEnv == "" {
		return nil, fmt.Errorf("%w: device %q: username %q needs password_file or password_env", ErrConfig, name, t.creds.Username)
	}
	t.Catalog, err = transports.NewCatalog(name, dev, []string{"poll", "subscribe"}, errs, parseTag, t.group)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// group builds a poll or subscribe group; a subscribe group samples at
// its interval and publishes at its publishing interval (by default the
// same).
func (t *Transport) group(pg *routes.PollGroup, tags []*tag) *group {
	g := &group{name: pg.Name, subscribe: pg.Mode == "subscribe", tags: tags,
		sampling: pg.Interval.D(), publishing: pg.PublishingInterval.D()}
	if g.sampling <= 0 {
		g.sampling = routes.DefaultPollInterval
	}
	if g.publishing <= 0 {
		g.publishing = g.sampling
	}
	if g.subscribe && len(g.tags) > 0 {
		t.subs = append(t.subs, g)
	}
	return g
}

// parseTag reads one tag's node id, type and deadband; the catalog has
// checked the rules of every tag (a name, a scale other than 0).
func parseTag(tg *routes.Tag) (*tag, error) {
	n, err := parseNodeID(tg.Address)
	if err != nil {
		return nil, fmt.Errorf("%w: tag %q: address %q: %w", ErrAddress, tg.Name, tg.Address, err)
	}
	t := &tag{name: tg.Name, address: tg.Address, node: n, scale: tg.Scale, offset: tg.Offset, deadband: tg.Deadband}
	if tg.Type != "" {
		k, ok := typeIDs[strings.ToLower(tg.Type)]
		if !ok {
			return nil, fmt.Errorf("%w: tag %q: type %q: want one of %s", ErrConfig, tg.Name, tg.Type, strings.Join(routes.TagTypes, ", "))
		}
		t.kind = k
	}
	if tg.Settings != nil {
		return nil, fmt.Errorf("%w: tag %q: settings %T are another kind's (such as Modbus's register, byte_order and bit), not OPC UA's", ErrConfig, tg.Name, tg.Settings)
	}
	if tg.Deadband < 0 {
		return nil, fmt.Errorf("%w: tag %q: deadband %v must not be negative", ErrConfig, tg.Name, tg.Deadband)
	}
	return t, nil
}

var _ transports.Notifier = (*Transport)(nil)

// SetNotify registers f to receive every value a subscription delivers
// (after the deadband), from the subscription's goroutine; f must not
// block. Poll of a subscribe group returns the latest of them.
func (t *Transport) SetNotify(f func(group string, v transports.Value)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notify = f
}

// Open connects, reads the server's limits and creates every
// subscription, within ActivationBound. ctx is the owner context: the
// session, every reconnection after it and the watchdog live only while
// ctx does, and the session is closed at once when ctx ends.
func (t *Transport) Open(ctx context.Context) error {
	err := t.Conn.Open(ctx, func(actx context.Context) error {
		_, err := t.session(actx)
		return err
	})
	if err != nil {
		return err
	}
	if len(t.subs) > 0 {
		t.wg.Add(1)
		go t.watchdog()
	}
	return nil
}

// closeSession ends a session: half the close bound for CloseSession,
// then the channel and socket are closed whatever the server does.
func (t *Transport) closeSession(s *session) {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), t.closeTimeout/2)
	defer cancel()
	_ = s.c.Close(ctx)
}

// session returns the live session, or connects one and sets it up (limits
// read, subscriptions created) under ctx and the owner context. The caller
// holds the Conn's Lock.
func (t *Transport) session(ctx context.Context) (*session, error) {
	s, fresh, err := t.Current(ctx)
	if err != nil || !fresh {
		return s, err
	}
	t.mu.Lock()
	t.sessions++
	t.mu.Unlock()
	if err := t.setup(ctx, s); err != nil {
		return nil, err
	}
	t.SetState(true, nil)
	return s, nil
}

// connect opens the secure channel and session; dctx ends at
// connect_timeout.
func (t *Transport) connect(dctx context.Context) (*session, error) {
	abort := &abortableDial{}
	defer abort.finish()
	stopAbort := abort.watch(dctx)
	defer stopAbort()
	opts := []opcua.Option{
		abort.option(),
		// The library must not reconnect on its own: a reconnection outside
		// the owner context could outlive it.
		opcua.AutoReconnect(false),
		opcua.RequestTimeout(t.requestTimeout),
		opcua.ApplicationName("leasebridge"),
		opcua.SessionName("leasebridge " + t.name),
	}
	anonymousNone := t.policy == PolicyNone && t.creds.Username == ""
	tokenType := ua.UserTokenTypeAnonymous
	if t.creds.Username != "" {
		pass, err := t.password()
		if err != nil {
			return nil, err
		}
		opts = append(opts, opcua.AuthUsername(t.creds.Username, pass))
		tokenType = ua.UserTokenTypeUserName
	} else if !anonymousNone {
		opts = append(opts, opcua.AuthAnonymous())
	}
	if t.policy != PolicyNone {
		cert, key, err := clientIdentity(t.certFile, t.keyFile, "urn:leasebridge:client")
		if err != nil {
			return nil, err
		}
		opts = append(opts, opcua.Certificate(cert), opcua.PrivateKey(key))
	}
	if anonymousNone {
		// Nothing to learn beforehand: the library takes the anonymous
		// token's policy id from the session's own endpoint list, so the
		// server sees one connection only.
		opts = append(opts, opcua.SecurityPolicy(ua.SecurityPolicyURINone), opcua.SecurityMode(ua.MessageSecurityModeNone))
	} else {
		sec, err := t.endpointSecurity(dctx, abort, tokenType)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sec)
	}
	c, err := opcua.NewClient(t.endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.Connect(dctx); err != nil {
		_ = c.Close(context.Background())
		if securityFailure(err) {
			// A renewed server certificate shows up here: ask again.
			t.mu.Lock()
			t.endpoints = nil
			t.mu.Unlock()
		}
		if dctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", err, dctx.Err())
		}
		return nil, err
	}
	sctx, scancel := context.WithCancel(context.Background())
	return &session{c: c, subs: map[string]*sub{}, ctx: sctx, cancel: scancel}, nil
}

// endpointSecurity is the security of the server's endpoint with the
// configured policy and mode, for a user token of tokenType. The endpoint
// list names the server certificate and the policy ids of the user tokens.
// It is asked once, on a short connection of its own closed before the
// session's is opened, and kept: asking again at every reconnection would
// double the connections a restarting server sees.
func (t *Transport) endpointSecurity(dctx context.Context, abort *abortableDial, tokenType ua.UserTokenType) (opcua.Option, error) {
	t.mu.Lock()
	eps := t.endpoints
	t.mu.Unlock()
	if eps == nil {
		var err error
		if eps, err = opcua.GetEndpoints(dctx, t.endpoint, abort.option()); err != nil {
			return nil, fmt.Errorf("get endpoints: %w", err)
		}
		t.mu.Lock()
		t.endpoints = eps
		t.mu.Unlock()
	}
	ep, err := opcua.SelectEndpoint(eps, t.policy, t.mode)
	if err != nil {
		return nil, fmt.Errorf("%w: the server offers no endpoint with policy %s and mode %s", ErrConfig, t.policy, t.mode)
	}
	return opcua.SecurityFromEndpoint(ep, tokenType), nil
}

// securityFailure reports a refusal that a fresh endpoint list (a renewed
// server certificate) could cure.
func securityFailure(err error) bool {
	for _, sc := range []ua.StatusCode{ua.StatusBadSecurityChecksFailed, ua.StatusBadCertificateInvalid,
		ua.StatusBadCertificateUntrusted, ua.StatusBadSecurityPolicyRejected, ua.StatusBadIdentityTokenInvalid} {
		if errors.Is(err, sc) {
			return true
		}
	}
	return false
}

func (t *Transport) password() (string, error) {
	p, err := t.creds.Password()
	if err != nil {
		return "", fmt.Errorf("%w: device %q: %w", ErrConfig, t.name, err)
	}
	return p, nil
}

// setup reads the server's MaxNodesPerRead (the first read of activation)
// and creates every subscription, within one request_timeout.
func (t *Transport) setup(ctx context.Context, s *session) error {
	rctx, cancel := context.WithTimeout(ctx, t.requestTimeout)
	defer cancel()
	limit := ua.NewNumericNodeID(0, id.Server_ServerCapabilities_OperationLimits_MaxNodesPerRead)
	res, err := t.read(rctx, s, []*ua.ReadValueID{{NodeID: limit, AttributeID: ua.AttributeIDValue}})
	if err != nil {
		return fmt.Errorf("device %q: first read: %w", t.name, err)
	}
	s.maxRead = 0
	if res[0].Status == ua.StatusOK && res[0].Value != nil {
		if v, ok := res[0].Value.Value().(uint32); ok {
			s.maxRead = int(v)
		}
	}
	for _, g := range t.subs {
		if err := t.subscribe(rctx, s, g); err != nil {
			t.fail(s, err)
			return fmt.Errorf("device %q: subscribe group %q: %w", t.name, g.name, err)
		}
	}
	return nil
}

// fail drops a session after a failed request.
func (t *Transport) fail(s *session, err error) {
	t.Drop(s)
	t.SetState(false, err)
}

// classify wraps a request error; any error but a bad service result
// closes the session, as its state is unknown.
func (t *Transport) classify(ctx context.Context, s *session, what string, err error) error {
	var sc ua.StatusCode
	if errors.As(err, &sc) && sc != ua.StatusBadTimeout && sc != ua.StatusBadServerNotConnected &&
		sc != ua.StatusBadSessionIDInvalid && sc != ua.StatusBadSecureChannelClosed && sc != ua.StatusBadConnectionClosed {
		return fmt.Errorf("%w: device %q: %s: %w", ErrStatus, t.name, what, err)
	}
	return t.Failed(ctx, s, what, err, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ua.StatusBadTimeout))
}

// read reads nodes in chunks of the server's MaxNodesPerRead, each bounded
// by request_timeout.
func (t *Transport) read(ctx context.Context, s *session, nodes []*ua.ReadValueID) ([]*ua.DataValue, error) {
	chunk := len(nodes)
	if s.maxRead > 0 {
		chunk = s.maxRead
	}
	out := make([]*ua.DataValue, 0, len(nodes))
	for start := 0; start < len(nodes); start += chunk {
		part := nodes[start:min(len(nodes), start+chunk)]
		if err := t.Guard(ctx); err != nil {
			return nil, fmt.Errorf("device %q: read: %w", t.name, err)
		}
		rctx, cancel := context.WithTimeout(ctx, t.requestTimeout)
		t.mu.Lock()
		t.reads++
		t.mu.Unlock()
		res, err := s.c.Read(rctx, &ua.ReadRequest{NodesToRead: part, TimestampsToReturn: ua.TimestampsToReturnBoth})
		cancel()
		if err == nil && res.ResponseHeader != nil && res.ResponseHeader.ServiceResult != ua.StatusOK {
			err = res.ResponseHeader.ServiceResult
		}
		if err == nil && len(res.Results) != len(part) {
			err = fmt.Errorf("%d results for %d nodes", len(res.Results), len(part))
		}
		if err != nil {
			return nil, t.classify(ctx, s, fmt.Sprintf("read of %d nodes", len(part)), err)
		}
		out = append(out, res.Results...)
	}
	t.SetState(true, nil)
	return out, nil
}

// value turns a data value into a tag's value, learning the node's type.
func (t *Transport) value(tg *tag, dv *ua.DataValue, now time.Time) transports.Value {
	ts := now
	switch {
	case dv == nil:
	case !dv.SourceTimestamp.IsZero():
		ts = dv.SourceTimestamp
	case !dv.ServerTimestamp.IsZero():
		ts = dv.ServerTimestamp
	}
	bad := func(err error) transports.Value {
		return transports.Value{Tag: tg.name, Quality: transports.Bad, Timestamp: ts, Err: fmt.Errorf("tag %q at %s: %w", tg.name, tg.address, err)}
	}
	switch {
	case dv == nil:
		return bad(fmt.Errorf("%w: no data value", ErrStatus))
	case dv.Status != ua.StatusOK:
		return bad(fmt.Errorf("%w: %w", ErrStatus, dv.Status))
	case dv.Value == nil || dv.Value.Value() == nil:
		return bad(fmt.Errorf("%w: empty value", ErrStatus))
	}
	t.mu.Lock()
	t.kinds[tg.name] = dv.Value.Type()
	t.mu.Unlock()
	return transports.Value{Tag: tg.name, Value: tagvalue.Scale(dv.Value.Value(), tg.scale, tg.offset), Quality: transports.Good, Timestamp: ts}
}

// Poll reads a poll group, or returns the latest values a subscribe
// group delivered (reading those of its tags that have none yet). A node
// the server answers with a bad status carries Bad quality with the
// status; Poll fails, with every value Bad, only when the server cannot be
// reached.
func (t *Transport) Poll(ctx context.Context, name string) ([]transports.Value, error) {
	g, vals, err := t.Group(name)
	if err != nil {
		return nil, err
	}
	t.Lock()
	defer t.Unlock()
	s, err := t.session(ctx)
	if err != nil {
		return transports.FailUnread(vals, err)
	}
	cached, missing := t.cached(g)
	if len(missing) > 0 {
		nodes := make([]*ua.ReadValueID, len(missing))
		for k, i := range missing {
			nodes[k] = &ua.ReadValueID{NodeID: g.tags[i].node, AttributeID: ua.AttributeIDValue}
		}
		res, err := t.read(ctx, s, nodes)
		if err != nil {
			return transports.FailUnread(vals, err)
		}
		now := time.Now()
		for k, i := range missing {
			vals[i] = t.value(g.tags[i], res[k], now)
		}
	}
	for i, v := range cached {
		vals[i] = v
	}
	if g.subscribe {
		t.mu.Lock()
		for _, i := range missing {
			// A notification that arrived meanwhile is newer: keep it.
			if _, ok := t.cache[g.tags[i].name]; !ok {
				t.cache[g.tags[i].name] = vals[i]
			}
		}
		t.mu.Unlock()
	}
	return vals, nil
}

// cached returns the delivered values of a subscribe group's tags by
// index, and the indexes of the tags to read (every tag of a poll group).
func (t *Transport) cached(g *group) (map[int]transports.Value, []int) {
	cached := map[int]transports.Value{}
	var missing []int
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, tg := range g.tags {
		if v, ok := t.cache[tg.name]; g.subscribe && ok {
			cached[i] = v
			continue
		}
		missing = append(missing, i)
	}
	return cached, missing
}

// Write writes one writable tag, converting value exactly to the node's
// data type (the configured type, or the type the node last reported,
// read first if unknown). value may be a bool, any Go number, a
// json.Number or a string; scale and offset are inverted first.
func (t *Transport) Write(ctx context.Context, name string, value any) error {
	tg, err := t.Writable(name)
	if err != nil {
		return err
	}
	wrap := func(err error) error {
		return fmt.Errorf("write tag %q at %s on device %q: %w", tg.name, tg.address, t.name, err)
	}
	t.Lock()
	defer t.Unlock()
	s, err := t.session(ctx)
	if err != nil {
		return wrap(err)
	}
	kind := tg.kind
	if kind == 0 {
		t.mu.Lock()
		kind = t.kinds[tg.name]
		t.mu.Unlock()
	}
	if kind == 0 {
		res, err := t.read(ctx, s, []*ua.ReadValueID{{NodeID: tg.node, AttributeID: ua.AttributeIDValue}})
		if err != nil {
			return wrap(err)
		}
		if v := t.value(tg, res[0], time.Now()); v.Err != nil {
			return wrap(fmt.Errorf("learn the node's type: %w", v.Err))
		}
		kind = res[0].Value.Type()
	}
	v, err := variantFor(tg, kind, value)
	if err != nil {
		return wrap(err)
	}
	if err := t.Guard(ctx); err != nil {
		return wrap(err)
	}
	wctx, cancel := context.WithTimeout(ctx, t.requestTimeout)
	defer cancel()
	res, err := s.c.Write(wctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: tg.node, AttributeID: ua.AttributeIDValue,
		Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: v},
	}}})
	if err == nil && res.ResponseHeader != nil && res.ResponseHeader.ServiceResult != ua.StatusOK {
		err = res.ResponseHeader.ServiceResult
	}
	if err != nil {
		return wrap(t.classify(ctx, s, "write", err))
	}
	if len(res.Results) != 1 {
		return wrap(fmt.Errorf("%w: %d results for one node", ErrIO, len(res.Results)))
	}
	if res.Results[0] != ua.StatusOK {
		return wrap(fmt.Errorf("%w: %w", ErrStatus, res.Results[0]))
	}
	t.SetState(true, nil)
	return nil
}

// subscribe creates the subscription of a group and its monitored items,
// and starts the goroutine that receives its notifications.
func (t *Transport) subscribe(ctx context.Context, s *session, g *group) error {
	if err := t.Guard(ctx); err != nil {
		return fmt.Errorf("device %q: subscribe: %w", t.name, err)
	}
	ch := make(chan *opcua.PublishNotificationData, 64)
	// A keep-alive at most every 10 s (and every 10 publishing intervals
	// at most) bounds how long the watchdog waits before it probes; the
	// library's default of 3000 intervals would hide a lost subscription
	// for minutes.
	ka := uint32(min(max(int64((10*time.Second+g.publishing-1)/g.publishing), 1), 10))
	params := &opcua.SubscriptionParameters{Interval: g.publishing, MaxKeepAliveCount: ka, LifetimeCount: 10 * ka}
	osub, err := s.c.Subscribe(ctx, params, ch)
	if err != nil {
		return t.classify(ctx, s, "create subscription", err)
	}
	items := make([]*ua.MonitoredItemCreateRequest, len(g.tags))
	for i, tg := range g.tags {
		r := opcua.NewMonitoredItemCreateRequestWithDefaults(tg.node, ua.AttributeIDValue, uint32(i))
		r.RequestedParameters.SamplingInterval = float64(g.sampling) / float64(time.Millisecond)
		r.RequestedParameters.QueueSize = 1
		if tg.deadband > 0 {
			r.RequestedParameters.Filter = ua.NewExtensionObject(&ua.DataChangeFilter{
				Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypeAbsolute), DeadbandValue: tg.deadband,
			})
		}
		items[i] = r
	}
	res, err := osub.Monitor(ctx, ua.TimestampsToReturnBoth, items...)
	if err == nil && res.ResponseHeader != nil && res.ResponseHeader.ServiceResult != ua.StatusOK {
		err = res.ResponseHeader.ServiceResult
	}
	if err == nil && len(res.Results) != len(items) {
		err = fmt.Errorf("%d results for %d monitored items", len(res.Results), len(items))
	}
	if err != nil {
		return t.classify(ctx, s, "create monitored items", err)
	}
	period := osub.RevisedPublishingInterval * time.Duration(max(osub.RevisedMaxKeepAliveCount, 1))
	sb := &sub{g: g, s: osub, keepalive: max(period, 2*osub.RevisedPublishingInterval, 10*time.Millisecond)}
	sb.ctx, sb.stop = context.WithCancel(s.ctx)
	now := time.Now()
	t.mu.Lock()
	sb.lastData = now
	for i, r := range res.Results {
		if r.StatusCode != ua.StatusOK {
			// The server refuses this node (unknown, not readable): its tag is
			// Bad until the subscription is recreated.
			t.cache[g.tags[i].name] = transports.Value{Tag: g.tags[i].name, Quality: transports.Bad, Timestamp: now,
				Err: fmt.Errorf("tag %q at %s: monitored item: %w: %w", g.tags[i].name, g.tags[i].address, ErrStatus, r.StatusCode)}
		}
	}
	s.subs[g.name] = sb
	t.mu.Unlock()
	s.wg.Add(1)
	go t.receive(s, sb, ch)
	return nil
}

// receive applies a subscription's notifications until its session ends.
func (t *Transport) receive(s *session, sb *sub, ch <-chan *opcua.PublishNotificationData) {
	defer s.wg.Done()
	defer sb.stop()
	for {
		select {
		case <-sb.ctx.Done():
			return
		case n := <-ch:
			if n == nil {
				continue
			}
			if n.Error != nil {
				t.mu.Lock()
				sb.lost = n.Error
				t.mu.Unlock()
				continue
			}
			dc, ok := n.Value.(*ua.DataChangeNotification)
			if !ok {
				continue
			}
			now := time.Now()
			var out []transports.Value
			for _, it := range dc.MonitoredItems {
				if it == nil || int(it.ClientHandle) >= len(sb.g.tags) {
					continue
				}
				tg := sb.g.tags[it.ClientHandle]
				v := t.value(tg, it.Value, now)
				t.mu.Lock()
				sb.lastData, sb.suspect = now, false
				old, had := t.cache[tg.name]
				if had && withinDeadband(tg, old, v) {
					t.mu.Unlock()
					continue
				}
				t.cache[tg.name] = v
				t.mu.Unlock()
				out = append(out, v)
			}
			t.mu.Lock()
			f := t.notify
			t.mu.Unlock()
			if f != nil {
				for _, v := range out {
					f(sb.g.name, v)
				}
			}
		}
	}
}

// withinDeadband reports whether v has not moved from old past the tag's
// absolute deadband (transports.Moved); status changes always pass.
func withinDeadband(tg *tag, old, v transports.Value) bool {
	if tg.deadband <= 0 || old.Quality != transports.Good || v.Quality != transports.Good {
		return false
	}
	return !transports.Moved(old.Value, v.Value, tg.deadband)
}

// differs reports whether a probed value shows a change the subscription
// should have delivered.
func differs(tg *tag, cached, read transports.Value) bool {
	if cached.Quality != read.Quality {
		return true
	}
	return read.Quality == transports.Good && transports.Moved(cached.Value, read.Value, max(tg.deadband, 0))
}

// watchdog keeps the subscriptions alive: it reconnects a dropped session,
// recreates a subscription the server reported gone, and probes a quiet
// subscription by reading its nodes. A change found by two probes one
// keep-alive period apart, never notified in between, means the server
// lost the subscription without saying so; it is then recreated.
func (t *Transport) watchdog() {
	defer t.wg.Done()
	period := time.Duration(math.MaxInt64)
	for _, g := range t.subs {
		period = min(period, g.publishing)
	}
	period = max(period, 10*time.Millisecond)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-t.Done():
			return
		case <-tick.C:
		}
		t.Lock()
		t.check(t.Owner())
		t.Unlock()
	}
}

// check is one watchdog round; the caller holds the Conn's Lock.
func (t *Transport) check(owner context.Context) {
	ctx, cancel := context.WithTimeout(owner, t.connectTimeout+t.requestTimeout)
	defer cancel()
	s, err := t.session(ctx)
	if err != nil {
		return // State carries the error; the next round tries again
	}
	for _, g := range t.subs {
		t.mu.Lock()
		sb := s.subs[g.name]
		var lost error
		quiet := false
		if sb != nil {
			lost = sb.lost
			quiet = time.Since(sb.lastData) >= sb.keepalive
		}
		t.mu.Unlock()
		switch {
		case sb == nil:
			lost = errors.New("no subscription")
		case lost == nil && quiet:
			if !t.probe(ctx, s, sb) {
				continue
			}
			lost = errors.New("a change was never notified")
		}
		if lost == nil {
			continue
		}
		if sb != nil {
			sb.stop()
			dctx, dcancel := context.WithTimeout(ctx, t.requestTimeout)
			_ = sb.s.Cancel(dctx) // best effort: the server may have lost it already
			dcancel()
		}
		if err := t.subscribe(ctx, s, g); err != nil {
			return
		}
		t.mu.Lock()
		t.recreated++
		t.mu.Unlock()
	}
}

// probe reads a quiet subscription's nodes; it reports true when a change
// seen by the previous probe is still there and was never notified.
func (t *Transport) probe(ctx context.Context, s *session, sb *sub) bool {
	nodes := make([]*ua.ReadValueID, len(sb.g.tags))
	for i, tg := range sb.g.tags {
		nodes[i] = &ua.ReadValueID{NodeID: tg.node, AttributeID: ua.AttributeIDValue}
	}
	res, err := t.read(ctx, s, nodes)
	if err != nil {
		return false
	}
	now := time.Now()
	changed := false
	for i, tg := range sb.g.tags {
		v := t.value(tg, res[i], now)
		t.mu.Lock()
		cached, ok := t.cache[tg.name]
		t.mu.Unlock()
		if !ok || differs(tg, cached, v) {
			changed = true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lost := changed && sb.suspect && time.Since(sb.lastData) >= sb.keepalive
	sb.suspect = changed
	sb.lastData = now // the next probe waits a whole keep-alive period
	if !changed {
		return false
	}
	return lost
}

// Interface checks.
var (
	_ transports.Poller = (*Transport)(nil)
	_ transports.Writer = (*Transport)(nil)
)
