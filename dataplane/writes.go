package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// Write reply codes. docs/writes.md explains each; a test checks that the
// page lists exactly these.
const (
	WriteOK          = "ok"           // written; the device acknowledged it
	WriteInvalid     = "invalid"      // not a valid request (JSON, fields, sizes)
	WriteRetained    = "retained"     // delivered as a retained message
	WriteRedelivered = "redelivered"  // the broker redelivered it: a former connection had it
	WriteDuplicate   = "duplicate"    // its id was already received within max_age
	WriteClockSkew   = "clock_skew"   // issued_at lies further ahead than clock_skew
	WriteStale       = "stale"        // older than max_age, or past expires_at
	WriteBusy        = "busy"         // the route's queue was full
	WriteNotOwner    = "not_owner"    // this process no longer owns the session
	WriteUnknownTag  = "unknown_tag"  // the device has no such tag
	WriteReadOnly    = "read_only"    // the tag is not writable
	WriteBadValue    = "bad_value"    // the value does not convert exactly to the tag's type
	WriteDeviceError = "device_error" // the device refused or did not answer
)

// WriteCode describes one reply code: when it is decided and whether the
// device was written. docs/writes.md is generated from WriteCodes.
type WriteCode struct {
	Code, Stage, Executed, Meaning string
}

// WriteCodes lists every reply code in the order a request meets them.
var WriteCodes = []WriteCode{
	{WriteOK, "device", "yes, once", "the device acknowledged the write"},
	{WriteInvalid, "receipt", "no", "not a valid request: not one JSON object, trailing data, a duplicate or unknown key, a missing or wrongly typed field, a bound exceeded"},
	{WriteRetained, "receipt", "no", "delivered as a retained message (the broker replayed a stored request, e.g. when a new owner subscribed); the stored copy is cleared"},
	{WriteDuplicate, "receipt", "no (this copy)", "another request with this id was received by this owner within max_age + clock_skew"},
	{WriteRedelivered, "receipt", "no (this copy)", "the broker redelivered the request (MQTT DUP flag) after an earlier connection or owner received it; that one may have executed it, so it is not executed again"},
	{WriteClockSkew, "receipt, before the write", "no", "issued_at lies further in the future of the bridge's clock than clock_skew"},
	{WriteStale, "receipt, before the write", "no", "issued_at lies more than max_age in the past, or expires_at has passed"},
	{WriteBusy, "receipt", "no", "the route's queue was full (or too many ids are remembered); try again"},
	{WriteNotOwner, "before the write", "no", "this process no longer owns the session (its lease ended or it fenced itself)"},
	{WriteUnknownTag, "before the write", "no", "the device has no tag of that name"},
	{WriteReadOnly, "before the write", "no", "the tag is not marked writable (or the device kind cannot write)"},
	{WriteBadValue, "before the write", "no", "the value does not convert exactly to the tag's type (see Values)"},
	{WriteDeviceError, "device", "unknown", "the device refused the write or did not answer in time; after a timeout the write may have taken effect"},
}

// Bounds of the write protocol, in docs/writes.md (checked by a test).
const (
	// MaxWriteRequestBytes bounds a request's payload.
	MaxWriteRequestBytes = 4096
	// MaxWriteIDBytes bounds a request id; MaxWriteTagBytes a tag name.
	MaxWriteIDBytes  = 128
	MaxWriteTagBytes = 128
	// MaxWriteMessageBytes bounds a reply's message.
	MaxWriteMessageBytes = 512
	// MaxWriteReplyBytes bounds a whole reply, whatever the request held.
	MaxWriteReplyBytes = 6144
	// WriteQueueDepth is how many accepted requests a write route holds
	// for its device; one more is answered busy.
	WriteQueueDepth = 256
	// MaxWriteIDsRemembered bounds the ids a route remembers (for
	// duplicate and redelivery detection) within max_age + clock_skew; a
	// request beyond it is answered busy.
	MaxWriteIDsRemembered = 100000
	// MaxWriteQoS0Backlog bounds the replies waiting to be published for
	// QoS 0 requests, which the broker sends without flow control; a QoS 0
	// request beyond it is dropped (logged and counted as "dropped").
	MaxWriteQoS0Backlog = 10000
)

// WriteDropped is the metric outcome of a QoS 0 request dropped because
// the reply backlog was full; it gets no reply.
const WriteDropped = "dropped"

// WriteRequest is the JSON a write route accepts on its request topic;
// docs/writes.md is the contract.
type WriteRequest struct {
	ID        string     `json:"id"`
	Tag       string     `json:"tag"`
	Value     any        `json:"value"`
	IssuedAt  time.Time  `json:"issued_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// WriteReply is the JSON a write route publishes on its reply topic.
type WriteReply struct {
	ID      string `json:"id"`
	Tag     string `json:"tag,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
	// AgeMS and LimitMS explain a stale or clock_skew refusal: the
	// request's age at judgement (negative: issued in the future) and the
	// limit it broke, in milliseconds.
	AgeMS   *int64 `json:"age_ms,omitempty"`
	LimitMS *int64 `json:"limit_ms,omitempty"`
	Session string `json:"session"`
	Route   string `json:"route"`
	Epoch   uint64 `json:"epoch"`
	// Timestamp is when the outcome was decided, Unix milliseconds.
	Timestamp int64 `json:"timestamp"`

	resent bool // a reply published before, sent again: not a new outcome
}

// writeReq is a parsed request.
type writeReq struct {
	id, tag string
	value   any // json.Number, string or bool
	issued  time.Time
	expires *time.Time
}

// writeJob is an accepted request waiting for the device.
type writeJob struct {
	m   mqtt.Message
	req writeReq
}

// replyJob is a reply to publish, then the request to acknowledge.
type replyJob struct {
	m     mqtt.Message
	rep   *WriteReply
	clear bool // also clear the retained request on its topic
}

// writer serves one write route for one term.
type writer struct {
	t     *Term
	route *routes.Route
	dev   transports.Transport
	local Publisher
	queue chan writeJob

	mu      sync.Mutex
	seen    map[string]*WriteReply // id -> reply, nil while pending
	order   []seenID               // ids by receipt, for pruning
	replies []replyJob
	qos0    int           // replies of QoS 0 requests in replies
	wake    chan struct{} // signals replies
}

type seenID struct {
	id string
	at time.Time
}

func newWriter(t *Term, r *routes.Route) *writer {
	return &writer{t: t, route: r, dev: t.Devices[r.Device], local: t.Brokers[r.Broker],
		queue: make(chan writeJob, WriteQueueDepth), seen: map[string]*WriteReply{}, wake: make(chan struct{}, 1)}
}

// enqueue runs on paho's delivery goroutine and never blocks: a request
// is queued for the device or answered (by the reply goroutine) at once.
// Nothing is acknowledged to the broker before its reply was published.
func (w *writer) enqueue(m mqtt.Message) {
	if len(m.Payload) == 0 {
		m.Ack() // how a retained request is cleared; not a request
		return
	}
	now := time.Now()
	req, rep := w.admit(m, now)
	if rep == nil {
		select {
		case w.queue <- writeJob{m: m, req: req}:
			return
		default:
			rep = w.reply(req, WriteBusy, fmt.Sprintf("the route's queue of %d requests is full", WriteQueueDepth))
			w.forget(req.id)
		}
	}
	w.decided(replyJob{m: m, rep: rep, clear: m.Retained})
}

// admit parses and judges a request on receipt; a non-nil reply refuses it.
func (w *writer) admit(m mqtt.Message, now time.Time) (writeReq, *WriteReply) {
	req, err := parseWriteRequest(m.Payload)
	if err != nil {
		return req, w.reply(req, WriteInvalid, err.Error())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked(now)
	prev, known := w.seen[req.id]
	switch {
	case m.Retained && known:
		// The stored copy of a request this term received live: cleared,
		// not answered twice.
		return req, &WriteReply{}
	case m.Retained:
		return req, w.reply(req, WriteRetained, "a retained request is never executed: the broker replayed a stored message; it is cleared")
	}
	if rep := w.fresh(req, now); rep != nil {
		return req, rep
	}
	switch {
	case known && m.Duplicate && prev != nil:
		// The broker resent a request this term answered: the same reply again.
		again := *prev
		again.resent = true
		return req, &again
	case known && m.Duplicate:
		return req, &WriteReply{} // pending: its reply will come; acknowledged then
	case known:
		return req, w.reply(req, WriteDuplicate, fmt.Sprintf("id already received within max_age %s", w.route.MaxAge.D()))
	case m.Duplicate:
		return req, w.reply(req, WriteRedelivered, "the broker redelivered this request: an earlier connection or owner received it and may have executed it; not executed again")
	case len(w.order) >= MaxWriteIDsRemembered:
		return req, w.reply(req, WriteBusy, fmt.Sprintf("%d request ids remembered within max_age", MaxWriteIDsRemembered))
	}
	w.seen[req.id] = nil
	w.order = append(w.order, seenID{id: req.id, at: now})
	return req, nil
}

// pruneLocked forgets ids received longer than max_age + clock_skew ago:
// a request that old is refused as stale before its id matters.
func (w *writer) pruneLocked(now time.Time) {
	limit := now.Add(-(w.route.MaxAge.D() + w.route.ClockSkew.D()))
	n := 0
	for n < len(w.order) && w.order[n].at.Before(limit) {
		delete(w.seen, w.order[n].id)
		n++
	}
	w.order = w.order[n:]
}

func (w *writer) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.seen, id)
}

// fresh judges a request's age at now on this bridge's clock; a non-nil
// reply refuses it (docs/writes.md, "Freshness").
func (w *writer) fresh(req writeReq, now time.Time) *WriteReply {
	age := now.Sub(req.issued)
	maxAge, skew := w.route.MaxAge.D(), w.route.ClockSkew.D()
	switch {
	case -age > skew:
		rep := w.reply(req, WriteClockSkew, fmt.Sprintf("issued_at is %s ahead of this bridge's clock, more than clock_skew %s", readableAge(-age), skew))
		rep.AgeMS, rep.LimitMS = ms(age), ms(skew)
		return rep
	case age > maxAge:
		rep := w.reply(req, WriteStale, fmt.Sprintf("issued %s ago, more than max_age %s", readableAge(age), maxAge))
		rep.AgeMS, rep.LimitMS = ms(age), ms(maxAge)
		return rep
	case req.expires != nil && now.After(*req.expires):
		rep := w.reply(req, WriteStale, fmt.Sprintf("expired %s ago (expires_at)", readableAge(now.Sub(*req.expires))))
		rep.AgeMS, rep.LimitMS = ms(age), ms(req.expires.Sub(req.issued))
		return rep
	}
	return nil
}

// readableAge prints an age as an operator reads it: to the millisecond
// under a minute, to the second under two days, else in days. A request
// with a zero or wrong issued_at is years old, and "60653h41m8.5s" hides
// that; age_ms keeps the exact figure.
func readableAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	case d < 48*time.Hour:
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%.1f days", d.Hours()/24)
}

func ms(d time.Duration) *int64 {
	v := d.Milliseconds()
	return &v
}

// reply builds a reply with the request's id and tag, bounded.
func (w *writer) reply(req writeReq, code, msg string) *WriteReply {
	return &WriteReply{ID: bounded(req.id, MaxWriteIDBytes), Tag: bounded(req.tag, MaxWriteTagBytes), Code: code,
		Message: bounded(msg, MaxWriteMessageBytes), Session: w.t.spec.Session, Route: w.route.Name, Epoch: w.t.spec.Epoch,
		Timestamp: time.Now().UnixMilli()}
}

// bounded cuts s to at most n bytes (on a rune boundary) and marks the cut.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("...[%d bytes cut]", len(s)-cut)
}

// run executes queued requests until ctx ends, and publishes replies.
// Requests still queued when it ends are neither answered nor
// acknowledged: the broker redelivers them to the next connection.
func (w *writer) run(ctx context.Context, valid func() bool) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.publishReplies(ctx) }()
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-w.queue:
			rep := w.execute(ctx, j.req, valid)
			w.mu.Lock()
			if _, ok := w.seen[j.req.id]; ok {
				w.seen[j.req.id] = rep
			}
			w.mu.Unlock()
			w.decided(replyJob{m: j.m, rep: rep})
		}
	}
}

// execute judges the request again right before the device write and
// writes it.
func (w *writer) execute(ctx context.Context, req writeReq, valid func() bool) *WriteReply {
	if rep := w.fresh(req, time.Now()); rep != nil {
		return rep
	}
	if !valid() {
		return w.reply(req, WriteNotOwner, "not the owner of session "+w.t.spec.Session)
	}
	wr, ok := w.dev.(transports.Writer)
	if !ok {
		return w.reply(req, WriteReadOnly, w.dev.Name()+" does not support writes")
	}
	err := wr.Write(ctx, req.tag, req.value)
	if err == nil {
		return w.reply(req, WriteOK, "")
	}
	code := WriteDeviceError
	switch {
	case errors.Is(err, transports.ErrUnknownTag):
		code = WriteUnknownTag
	case errors.Is(err, transports.ErrReadOnly):
		code = WriteReadOnly
	case errors.Is(err, transports.ErrBadValue):
		code = WriteBadValue
	case errors.Is(err, transports.ErrGuard):
		code = WriteNotOwner
	default:
		w.t.spec.Env.TransportError(w.dev.Name(), "write")
	}
	return w.reply(req, code, err.Error())
}

// decided records an outcome the moment it is decided (audit log and
// metric; a copy's repeated reply is not a new outcome) and hands the
// reply to the reply goroutine. A QoS 0 request beyond
// MaxWriteQoS0Backlog is dropped instead: QoS 0 has no flow control.
func (w *writer) decided(j replyJob) {
	w.mu.Lock()
	if j.m.QoS == 0 && w.qos0 >= MaxWriteQoS0Backlog {
		w.mu.Unlock()
		w.audit(j.rep, WriteDropped)
		return
	}
	if j.m.QoS == 0 {
		w.qos0++
	}
	w.replies = append(w.replies, j)
	w.mu.Unlock()
	if j.rep.Code != "" && !j.rep.resent {
		w.audit(j.rep, j.rep.Code)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// publishReplies publishes each reply, then acknowledges its request, in
// order, until ctx ends. A reply that cannot be published leaves its
// request unacknowledged, so the broker redelivers it.
func (w *writer) publishReplies(ctx context.Context) {
	for {
		w.mu.Lock()
		batch := w.replies
		w.replies = nil
		w.mu.Unlock()
		for _, j := range batch {
			if j.m.QoS == 0 {
				w.mu.Lock()
				w.qos0--
				w.mu.Unlock()
			}
			if !w.publish(ctx, j) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
	}
}

// publish sends one reply; false when ctx ended.
func (w *writer) publish(ctx context.Context, j replyJob) bool {
	if j.rep.Code == "" { // a second delivery of a request answered (or to be) once
		if j.clear {
			if err := w.local.Publish(ctx, j.m.Topic, 1, true, nil); err != nil {
				return ctx.Err() == nil
			}
		}
		j.m.Ack()
		return true
	}
	// Only strings and integers: Marshal cannot fail. The bounds on id,
	// tag and message keep the reply within MaxWriteReplyBytes.
	b, _ := json.Marshal(j.rep)
	err := w.local.Publish(ctx, w.route.ReplyTopic, byte(w.route.QoS), false, b)
	if err == nil && j.clear {
		err = w.local.Publish(ctx, j.m.Topic, 1, true, nil)
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		w.t.spec.Env.Log().Warn("write reply not published; the broker redelivers the request", "route", w.route.Name, "id", j.rep.ID, "err", err)
		return true
	}
	j.m.Ack()
	return true
}

// audit logs and counts one outcome.
func (w *writer) audit(rep *WriteReply, outcome string) {
	env := w.t.spec.Env
	env.WriteOutcome(w.route.Name, outcome)
	attrs := []any{"route", w.route.Name, "id", rep.ID, "tag", rep.Tag, "outcome", outcome, "epoch", w.t.spec.Epoch}
	if outcome == WriteOK {
		env.Log().Info("write", attrs...)
		return
	}
	env.Log().Warn("write refused", append(attrs, "reason", rep.Message)...)
}

// parseWriteRequest decodes a request strictly: one JSON object, no
// trailing data, no duplicate or unknown keys, scalar values, the
// documented bounds. On error the request holds what was read (the id
// when it was), so the reply can name it.
func parseWriteRequest(b []byte) (writeReq, error) {
	var req writeReq
	if len(b) > MaxWriteRequestBytes {
		return req, fmt.Errorf("request of %d bytes exceeds %d", len(b), MaxWriteRequestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return req, errors.New(`want a JSON object {"id", "tag", "value", "issued_at"}`)
	}
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return req, fmt.Errorf("malformed JSON: %w", err)
		}
		key := k.(string)
		if seen[key] {
			return req, fmt.Errorf("duplicate key %q", bounded(key, 32))
		}
		seen[key] = true
		v, err := dec.Token()
		if err != nil {
			return req, fmt.Errorf("malformed JSON: %w", err)
		}
		if err := req.set(key, v); err != nil {
			return req, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return req, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("trailing data after the JSON object")
	}
	return req, req.check(seen)
}

// set stores one field.
func (r *writeReq) set(key string, v json.Token) error {
	if _, nested := v.(json.Delim); nested {
		return fmt.Errorf("%s: want a string, number or boolean, not an object or array", bounded(key, 32))
	}
	str, isStr := v.(string)
	switch key {
	case "id", "tag":
		if !isStr {
			return fmt.Errorf("%s: want a string", key)
		}
		if key == "id" {
			r.id = str
		} else {
			r.tag = str
		}
	case "value":
		if v == nil {
			return errors.New("value: null is not a value")
		}
		r.value = v
	case "issued_at", "expires_at":
		t, err := time.Parse(time.RFC3339Nano, str)
		if !isStr || err != nil {
			return fmt.Errorf("%s: want an RFC 3339 time such as 2026-12-01T15:04:05.123Z", key)
		}
		if key == "issued_at" {
			r.issued = t
		} else {
			r.expires = &t
		}
	default:
		return fmt.Errorf("unknown key %q (want id, tag, value, issued_at, expires_at)", bounded(key, 32))
	}
	return nil
}

// check enforces the required fields and bounds.
func (r *writeReq) check(seen map[string]bool) error {
	for _, k := range []string{"id", "tag", "value", "issued_at"} {
		if !seen[k] {
			return fmt.Errorf("%s is required", k)
		}
	}
	switch {
	case r.id == "" || len(r.id) > MaxWriteIDBytes:
		return fmt.Errorf("id of %d bytes: want 1 to %d", len(r.id), MaxWriteIDBytes)
	case r.tag == "" || len(r.tag) > MaxWriteTagBytes:
		return fmt.Errorf("tag of %d bytes: want 1 to %d", len(r.tag), MaxWriteTagBytes)
	case r.expires != nil && r.expires.Before(r.issued):
		return errors.New("expires_at is before issued_at")
	}
	return nil
}

// commandFilters lists the request topics of every write route on broker:
// a bridge never forwards a retained message into one of them.
func commandFilters(cfg *routes.Config, broker string) []string {
	var out []string
	for _, r := range cfg.Routes {
		if r.Kind == routes.RouteWrite && r.Broker == broker && !slices.Contains(out, r.RequestTopic) {
			out = append(out, r.RequestTopic)
		}
	}
	return out
}
