package mqtt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Directions of a bridge topic mapping.
const (
	// In forwards from the remote broker to the local one.
	In = "in"
	// Out forwards from the local broker to the remote one.
	Out = "out"
)

// BridgeQueueDepth bounds the messages a bridge direction holds between the
// source's delivery and the target's acknowledgement. QoS 1/2 traffic is
// bounded well below it by the source broker's in-flight window, because
// nothing is acknowledged before it was forwarded.
const BridgeQueueDepth = 4096

// QueueNeed is the per-client queue limit a source broker needs to keep
// rate messages a second for gap (an owner-death budget) while no bridge
// owner is connected: ceil(rate x gap). docs/bridged-data.md shows it.
func QueueNeed(rate float64, gap time.Duration) int64 {
	return int64(math.Ceil(rate * gap.Seconds()))
}

// Bridge forwards messages of a bridge route between a remote broker and
// the local one, exclusively for its session: both Clients use the
// session's fixed client ids. A message from the source is acknowledged
// only after the target acknowledged it, so at QoS 1 and 2 a message is
// never lost to a restart of either broker or a failover (it may arrive
// twice: at-least-once).
//
// Payloads are forwarded verbatim; the epoch is not added to them.
type Bridge struct {
	name          string
	remote, local *Client
	in, out       chan pending
	forwarded     [2]atomic.Int64
	dropped       atomic.Int64
	// refused counts retained messages not forwarded into a write
	// request topic; the bridge test reads it to tell a refused replay
	// from one that never arrived.
	refused atomic.Int64
	run     sync.Mutex
	// commands are the write request filters on each target broker (in:
	// local, out: remote): a retained message is never forwarded into
	// them.
	commands [2][]string
}

type pending struct {
	m   Message
	dst string
	qos byte
}

type mapping struct {
	from, to, dir string
	qos           byte
	prefix        string // From up to its first wildcard level
	wildcard      bool
}

// NewBridge registers the route's subscriptions on the source Client of
// each mapping; it must be called before either Client is opened. Run
// forwards while the session owns the lease.
func NewBridge(name string, remote, local *Client, topics []*routes.TopicMap) (*Bridge, error) {
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: bridge %s: no topics", ErrConfig, name)
	}
	// Two brokers configured with the same address and client id are one
	// broker that would see the session twice: each connection would take
	// the other's place forever.
	if remote.s.url.Host == local.s.url.Host && remote.s.clientID == local.s.clientID {
		return nil, fmt.Errorf("%w: bridge %s: remote %s and local %s are the same broker with the same client id %s", ErrConfig, name, remote.URL(), local.URL(), local.ClientID())
	}
	b := &Bridge{name: name, remote: remote, local: local,
		in: make(chan pending, BridgeQueueDepth), out: make(chan pending, BridgeQueueDepth)}
	for _, t := range topics {
		m, err := newMapping(t)
		if err != nil {
			return nil, fmt.Errorf("bridge %s: %w", name, err)
		}
		src, q := remote, b.in
		if m.dir == Out {
			src, q = local, b.out
		}
		sub := Subscription{Filter: m.from, QoS: m.qos, ManualAck: true, Handler: b.enqueue(m, q)}
		if err := src.Subscribe(sub); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", name, err)
		}
	}
	return b, nil
}

func newMapping(t *routes.TopicMap) (mapping, error) {
	m := mapping{from: t.From, to: t.To, dir: t.Direction, qos: byte(t.QoS)}
	if m.dir == "" {
		m.dir = In
	}
	if m.dir != In && m.dir != Out {
		return m, fmt.Errorf("%w: topic %s: direction %q: want in or out", ErrConfig, t.From, t.Direction)
	}
	if t.QoS < 0 || t.QoS > 2 {
		return m, fmt.Errorf("%w: topic %s: qos %d: want 0, 1 or 2", ErrConfig, t.From, t.QoS)
	}
	if m.from == "" {
		return m, fmt.Errorf("%w: bridge topic mapping without from", ErrConfig)
	}
	if strings.ContainsAny(m.to, "+#") {
		return m, fmt.Errorf("%w: topic %s: to %q: a target cannot hold wildcards", ErrConfig, t.From, t.To)
	}
	levels := strings.Split(m.from, "/")
	for i, l := range levels {
		if l == "+" || l == "#" {
			m.wildcard = true
			if i > 0 {
				m.prefix = strings.Join(levels[:i], "/") + "/"
			}
			break
		}
	}
	if m.wildcard && m.to != "" && !strings.HasSuffix(m.to, "/") {
		m.to += "/"
	}
	return m, nil
}

// target maps a source topic: an empty To keeps it; a filter without
// wildcards maps to To exactly; otherwise the part before the first
// wildcard level is replaced by To.
func (m mapping) target(topic string) string {
	switch {
	case m.to == "":
		return topic
	case !m.wildcard:
		return m.to
	}
	return m.to + strings.TrimPrefix(topic, m.prefix)
}

// RefuseRetainedInto names the write request filters on the local and on
// the remote broker. A message the source delivers retained (a stored
// message, sent because the bridge subscribed, e.g. at every takeover)
// whose target matches one of them is acknowledged and not forwarded: a
// stale command must not reach a write route. Call it before Run.
func (b *Bridge) RefuseRetainedInto(local, remote []string) {
	b.commands = [2][]string{local, remote}
}

func (b *Bridge) enqueue(m mapping, q chan pending) func(Message) {
	dir := 0
	if m.dir == Out {
		dir = 1
	}
	return func(msg Message) {
		p := pending{m: msg, dst: m.target(msg.Topic), qos: m.qos}
		if msg.Retained && matchesAny(b.commands[dir], p.dst) {
			b.refused.Add(1)
			msg.Ack()
			return
		}
		if msg.QoS == 0 {
			// At most once: never hold up the source for it.
			select {
			case q <- p:
			default:
				b.dropped.Add(1)
			}
			return
		}
		q <- p
	}
}

// Name is the bridge route's name.
func (b *Bridge) Name() string { return b.name }

// Forwarded counts messages forwarded in (remote to local) and out.
func (b *Bridge) Forwarded() (in, out int64) {
	return b.forwarded[0].Load(), b.forwarded[1].Load()
}

// Dropped counts QoS 0 messages dropped because a queue was full.
func (b *Bridge) Dropped() int64 { return b.dropped.Load() }

// Run forwards both directions until ctx ends. The session runs it while it
// owns the lease, next to its opened Clients.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.run.TryLock() {
		return fmt.Errorf("mqtt: bridge %s: already running", b.name)
	}
	defer b.run.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b.forward(ctx, b.in, b.local, 0) }()
	go func() { defer wg.Done(); b.forward(ctx, b.out, b.remote, 1) }()
	wg.Wait()
	return ctx.Err()
}

// forward publishes each message to dst and acknowledges it to its source
// only once dst acknowledged it; a failed publish waits for dst to
// converge again and is retried, in order.
func (b *Bridge) forward(ctx context.Context, q <-chan pending, dst *Client, dir int) {
	for {
		var p pending
		select {
		case <-ctx.Done():
			return
		case p = <-q:
		}
		for {
			err := dst.Publish(ctx, p.dst, p.qos, p.m.Retained, p.m.Payload)
			if err == nil {
				p.m.Ack()
				b.forwarded[dir].Add(1)
				break
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, ErrNotConnected) {
				_, _ = dst.WaitState(ctx, func(s transports.State) bool { return s.Converged })
			}
			// A short pause so a connection that is converged on paper but
			// already gone (or a target refusing the publish) is not spun on.
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// matchesAny reports whether topic matches one of the MQTT filters.
func matchesAny(filters []string, topic string) bool {
	for _, f := range filters {
		if TopicMatches(f, topic) {
			return true
		}
	}
	return false
}

// TopicMatches reports whether topic matches the MQTT filter (+ one level,
// # the rest, including the parent level).
func TopicMatches(filter, topic string) bool {
	fs, ts := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, f := range fs {
		switch {
		case f == "#":
			return true
		case i >= len(ts):
			return false
		case f != "+" && f != ts[i]:
			return false
		}
	}
	return len(fs) == len(ts)
}
