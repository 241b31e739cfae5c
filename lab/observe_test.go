package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
)

// arrival is one value message as a subscriber on a bridge's broker
// received it.
type arrival struct {
	At     time.Time
	Epoch  uint64
	Broker int
	// Stale is true when a higher epoch had already been seen.
	Stale bool
}

// valueWatch subscribes to the value topics on every bridge's broker
// directly (not through the bridges' fault proxies) and records each
// value's arrival and epoch: "from outside" is the first value whose
// epoch is new.
type valueWatch struct {
	mu       sync.Mutex
	all      []arrival
	maxEpoch uint64
	changed  chan struct{}
	clients  []paho.Client
}

func watchValues(t *testing.T, urls []string) *valueWatch {
	t.Helper()
	w := &valueWatch{changed: make(chan struct{})}
	for i, u := range urls {
		i := i
		o := paho.NewClientOptions().AddBroker(u).SetClientID(fmt.Sprintf("lab-watch-%d", i)).SetProtocolVersion(4).
			SetCleanSession(true).SetAutoReconnect(true).SetConnectRetry(true).SetKeepAlive(5 * time.Second).
			SetOnConnectHandler(func(c paho.Client) {
				c.Subscribe("lab/#", 0, func(_ paho.Client, m paho.Message) { w.record(i, m.Payload()) })
			})
		c := paho.NewClient(o)
		tok := c.Connect()
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("lab watcher: connect %s: %v", u, tok.Error())
		}
		w.clients = append(w.clients, c)
	}
	t.Cleanup(func() {
		for _, c := range w.clients {
			c.Disconnect(100)
		}
	})
	return w
}

func (w *valueWatch) record(broker int, payload []byte) {
	at := time.Now()
	var v struct {
		Epoch *uint64 `json:"epoch"`
	}
	if json.Unmarshal(payload, &v) != nil || v.Epoch == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	stale := *v.Epoch < w.maxEpoch
	w.all = append(w.all, arrival{At: at, Epoch: *v.Epoch, Broker: broker, Stale: stale})
	w.maxEpoch = max(w.maxEpoch, *v.Epoch)
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitAbove waits for the first value with an epoch above e.
func (w *valueWatch) waitAbove(ctx context.Context, e uint64) (arrival, error) {
	for {
		w.mu.Lock()
		ch := w.changed
		for _, a := range w.all {
			if a.Epoch > e {
				w.mu.Unlock()
				return a, nil
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return arrival{}, fmt.Errorf("no value with an epoch above %d: %w", e, ctx.Err())
		case <-ch:
		}
	}
}

// latest is the last arrival.
func (w *valueWatch) latest() (arrival, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.all) == 0 {
		return arrival{}, false
	}
	return w.all[len(w.all)-1], true
}

// highest is the highest epoch seen.
func (w *valueWatch) highest() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxEpoch
}

// epochsAbove lists the epochs above e of the values that arrived in
// [from, to], ascending.
func (w *valueWatch) epochsAbove(e uint64, from, to time.Time) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[uint64]bool{}
	var out []uint64
	for _, a := range w.all {
		if a.Epoch > e && !seen[a.Epoch] && !a.At.Before(from) && !a.At.After(to) {
			seen[a.Epoch] = true
			out = append(out, a.Epoch)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// staleBetween counts values that arrived in [from, to] with an epoch
// below one already seen: what a consumer filtering on epoch drops.
func (w *valueWatch) staleBetween(from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.all {
		if a.Stale && !a.At.Before(from) && !a.At.After(to) {
			n++
		}
	}
	return n
}

// maxGap is the longest interval without a value of epoch e between from
// and to (the ends count as boundaries).
func (w *valueWatch) maxGap(e uint64, from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := from
	var gap time.Duration
	for _, a := range w.all {
		if a.Epoch != e || a.At.Before(from) || a.At.After(to) {
			continue
		}
		gap = max(gap, a.At.Sub(prev))
		prev = a.At
	}
	return max(gap, to.Sub(prev))
}

// upEvent is a connection's cumulative upstream counters as observed at
// an instant.
type upEvent struct {
	At       time.Time
	BytesUp  int64
	Requests int64
}

// connTrack is the observed life of one device connection.
type connTrack struct {
	ID       int
	Client   string
	OpenAt   time.Time
	CloseAt  time.Time // zero while open
	Upstream bool
	Ups      []upEvent // one per change of the upstream counters
}

func (c *connTrack) firstUp() time.Time {
	if len(c.Ups) == 0 {
		return time.Time{}
	}
	return c.Ups[0].At
}

func (c *connTrack) lastUp() time.Time {
	if len(c.Ups) == 0 {
		return time.Time{}
	}
	return c.Ups[len(c.Ups)-1].At
}

// at returns the counters in effect at instant t.
func (c *connTrack) at(t time.Time) upEvent {
	var e upEvent
	for _, u := range c.Ups {
		if u.At.After(t) {
			break
		}
		e = u
	}
	return e
}

type currentEvent struct {
	At      time.Time
	Current int
}

// plcRecorder keeps the timeline of the PLC's counting proxy: every
// connection's open, close and upstream traffic, and the number of open
// connections. It is woken by the proxy on every change (WaitFor), so it
// never samples on a timer.
type plcRecorder struct {
	mu      sync.Mutex
	conns   map[int]*connTrack
	current []currentEvent
	changed chan struct{}
}

func recordPLC(ctx context.Context, p *faultproxy.Proxy) *plcRecorder {
	r := &plcRecorder{conns: map[int]*connTrack{}, changed: make(chan struct{})}
	go func() { _ = p.WaitFor(ctx, r.observe) }()
	return r
}

func (r *plcRecorder) observe(s faultproxy.Stats) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, cs := range s.Conns {
		c, ok := r.conns[cs.ID]
		if !ok {
			c = &connTrack{ID: cs.ID, Client: cs.Client, OpenAt: now, Upstream: cs.Upstream}
			r.conns[cs.ID] = c
			changed = true
		}
		if n := len(c.Ups); (n == 0 && cs.BytesUp > 0) || (n > 0 && c.Ups[n-1].BytesUp != cs.BytesUp) {
			c.Ups = append(c.Ups, upEvent{At: now, BytesUp: cs.BytesUp, Requests: cs.Requests})
			changed = true
		}
		if !cs.Open && c.CloseAt.IsZero() {
			c.CloseAt = now
			changed = true
		}
	}
	if n := len(r.current); n == 0 || r.current[n-1].Current != s.Current {
		r.current = append(r.current, currentEvent{At: now, Current: s.Current})
		changed = true
	}
	if changed {
		close(r.changed)
		r.changed = make(chan struct{})
	}
	return false
}

// conn returns a copy of a connection's track.
func (r *plcRecorder) conn(id int) (connTrack, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.conns[id]
	if !ok {
		return connTrack{}, false
	}
	cp := *c
	cp.Ups = append([]upEvent(nil), c.Ups...)
	return cp, true
}

// waitClosed waits until connection id is closed.
func (r *plcRecorder) waitClosed(ctx context.Context, id int) (connTrack, error) {
	for {
		r.mu.Lock()
		ch := r.changed
		c := r.conns[id]
		closed := c != nil && !c.CloseAt.IsZero()
		r.mu.Unlock()
		if closed {
			cp, _ := r.conn(id)
			return cp, nil
		}
		select {
		case <-ctx.Done():
			return connTrack{}, fmt.Errorf("device connection %d still open: %w", id, ctx.Err())
		case <-ch:
		}
	}
}

// peakOpen is the most connections open at once in [from, to].
func (r *plcRecorder) peakOpen(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	peak := 0
	for i, e := range r.current {
		if e.At.After(to) {
			break
		}
		if next := i + 1; e.At.Before(from) && next < len(r.current) && !r.current[next].At.After(from) {
			continue // superseded before the window
		}
		peak = max(peak, e.Current)
	}
	return peak
}

// servingInterval is the span over which a connection sent requests.
type servingInterval struct {
	ID          int
	First, Last time.Time
}

func (r *plcRecorder) intervals() []servingInterval {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []servingInterval
	for _, c := range r.conns {
		if len(c.Ups) > 0 {
			out = append(out, servingInterval{ID: c.ID, First: c.firstUp(), Last: c.lastUp()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First.Before(out[j].First) })
	return out
}

// peakServing is the most connections whose request spans (first to last
// upstream byte) overlap at one instant within [from, to]. Observations
// of two connections in one wake-up count as overlapping.
func (r *plcRecorder) peakServing(from, to time.Time) int {
	iv := r.intervals()
	peak := 0
	for _, a := range iv {
		if a.Last.Before(from) || a.First.After(to) {
			continue
		}
		n := 0
		for _, b := range iv {
			if !b.First.After(a.First) && !b.Last.Before(a.First) {
				n++
			}
		}
		peak = max(peak, n)
	}
	return peak
}

// overlaps lists every pair of connections that served at once over the
// whole run.
func (r *plcRecorder) overlaps() []string {
	iv := r.intervals()
	var out []string
	for i := 1; i < len(iv); i++ {
		for j := 0; j < i; j++ {
			if !iv[i].First.After(iv[j].Last) {
				out = append(out, fmt.Sprintf("device connections %d and %d both sent requests between %s and %s",
					iv[j].ID, iv[i].ID, iv[i].First.Format(time.RFC3339Nano), iv[j].Last.Format(time.RFC3339Nano)))
			}
		}
	}
	return out
}

func (r *plcRecorder) summary() string {
	iv := r.intervals()
	var b strings.Builder
	for _, s := range iv {
		c, _ := r.conn(s.ID)
		fmt.Fprintf(&b, "conn %d %s open %s close %s requests %s..%s\n", c.ID, c.Client, c.OpenAt.Format("15:04:05.000"),
			c.CloseAt.Format("15:04:05.000"), s.First.Format("15:04:05.000"), s.Last.Format("15:04:05.000"))
	}
	return b.String()
}
