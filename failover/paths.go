package failover

import (
	"sort"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/transports"
)

// pathKind says which path a transport belongs to.
type pathKind uint8

const (
	pathNone pathKind = iota
	pathDevice
	pathBroker
)

// deviceHealth is one device as this owner last reached it.
type deviceHealth struct {
	up bool
	// since is when the device was last seen failing after being up, or
	// the ownership's start while it has not been reached yet.
	since    time.Time
	lastGood time.Time
	err      error
}

// pathHealth tracks, for one ownership of a session, how long its broker
// path and each of its devices have been failing. Both clocks start when
// the ownership starts: a path that never works during activation counts
// exactly like one lost later.
type pathHealth struct {
	s     *session
	start time.Time

	mu sync.Mutex
	// During activation: the transport being opened and the last one that
	// failed (cleared when it opens).
	opening, failed         pathKind
	openingName, failedName string
	failedErr               error
	attempt                 time.Time // start of the current activation attempt
	brokerSince             time.Time // first attempt that reached the brokers
	activated               bool
	devices                 map[string]*deviceHealth
	// changed is signalled when a device goes up or down after activation.
	changed chan struct{}
}

func newPathHealth(s *session, start time.Time, devices []string) *pathHealth {
	h := &pathHealth{s: s, start: start, devices: map[string]*deviceHealth{}, changed: make(chan struct{}, 1)}
	for _, d := range devices {
		h.devices[d] = &deviceHealth{since: start}
	}
	return h
}

// beginAttempt marks the start of one activation attempt.
func (h *pathHealth) beginAttempt(now time.Time) {
	h.mu.Lock()
	h.attempt = now
	h.mu.Unlock()
}

// beginOpen records that a transport starts opening. The broker path's
// clock starts at the attempt that first reaches the brokers: the
// ownership's start unless the devices failed first.
func (h *pathHealth) beginOpen(kind pathKind, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opening, h.openingName = kind, name
	if kind == pathBroker && h.brokerSince.IsZero() {
		h.brokerSince = h.attempt
	}
}

// endOpen records the outcome of opening a transport.
func (h *pathHealth) endOpen(kind pathKind, name string, err error, now time.Time) {
	h.mu.Lock()
	h.opening, h.openingName = pathNone, ""
	switch {
	case err != nil:
		h.failed, h.failedName, h.failedErr = kind, name, err
	case h.failed == kind && h.failedName == name:
		h.failed, h.failedName, h.failedErr = pathNone, "", nil
	}
	h.mu.Unlock()
	if kind == pathDevice {
		h.device(name, err, now)
	}
}

// markActivated ends activation: from now on the transports report their
// own state.
func (h *pathHealth) markActivated() {
	h.mu.Lock()
	h.activated = true
	h.mu.Unlock()
}

// activationBroker is the broker path's state during activation: not
// converged since the first attempt that reached the brokers while a
// broker's open fails or is under way, converged otherwise (a broker
// waiting its turn behind a failing device is not failing).
func (h *pathHealth) activationBroker() transports.State {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.activated || h.brokerSince.IsZero() || (h.failed != pathBroker && h.opening != pathBroker) {
		return transports.State{Converged: true}
	}
	var err error
	if h.failed == pathBroker {
		err = h.failedErr
	}
	return transports.State{Since: h.brokerSince, Err: err}
}

// downDevice returns the device that has been failing longest and since
// when; ok is false when every device is up. During activation only a
// device whose open failed or is under way counts: one that waits its turn
// behind a failing broker is not failing.
func (h *pathHealth) downDevice() (name string, since time.Time, err error, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n, d := range h.devices {
		if d.up {
			continue
		}
		if !h.activated && !(h.failed == pathDevice && h.failedName == n) && !(h.opening == pathDevice && h.openingName == n && h.failed != pathBroker) {
			continue
		}
		if !ok || d.since.Before(since) {
			name, since, err, ok = n, d.since, d.err, true
		}
	}
	return name, since, err, ok
}

// device records one attempt to reach a device: err nil means it answered.
func (h *pathHealth) device(name string, err error, now time.Time) {
	h.mu.Lock()
	d := h.devices[name]
	if d == nil {
		d = &deviceHealth{since: h.start}
		h.devices[name] = d
	}
	flipped := d.up != (err == nil)
	switch {
	case err == nil:
		d.up, d.lastGood, d.err = true, now, nil
	case d.up:
		d.up, d.since, d.err = false, now, err
	default:
		d.err = err
	}
	activated := h.activated
	h.mu.Unlock()
	m := h.s.sup.o.Metrics
	up := 0.0
	if err == nil {
		up = 1
		m.DeviceLastGood.WithLabelValues(h.s.name, name).Set(float64(now.UnixNano()) / 1e9)
	}
	m.DeviceUp.WithLabelValues(h.s.name, name).Set(up)
	if flipped && activated {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// allUp reports whether every device answered its last request.
func (h *pathHealth) allUp() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.devices {
		if !d.up {
			return false
		}
	}
	return true
}

// status lists the devices by name for SessionStatus.
func (h *pathHealth) status() []DeviceStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]DeviceStatus, 0, len(h.devices))
	for n, d := range h.devices {
		st := DeviceStatus{Device: n, Up: d.up}
		if !d.lastGood.IsZero() {
			st.LastGoodUnixNS = d.lastGood.UnixNano()
		}
		if !d.up && !d.since.IsZero() {
			st.DownSinceUnixNS = d.since.UnixNano()
		}
		if d.err != nil {
			st.Error = d.err.Error()
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// forget removes this ownership's device_up series: a standby does not
// know whether the device is up. The last-good timestamps stay.
func (h *pathHealth) forget() {
	h.mu.Lock()
	names := make([]string, 0, len(h.devices))
	for n := range h.devices {
		names = append(names, n)
	}
	h.mu.Unlock()
	for _, n := range names {
		h.s.sup.o.Metrics.DeviceUp.DeleteLabelValues(h.s.name, n)
	}
}

// DeviceStatus is one device of an owned session as the owner last
// reached it.
type DeviceStatus struct {
	Device string `json:"device"`
	// Up is true when the device answered the owner's last request.
	Up bool `json:"up"`
	// LastGoodUnixNS is when it last answered, in Unix nanoseconds.
	LastGoodUnixNS int64 `json:"last_good_unix_ns,omitempty"`
	// DownSinceUnixNS is when it stopped answering (or the ownership's
	// start, when it has not answered yet); absent while up.
	DownSinceUnixNS int64 `json:"down_since_unix_ns,omitempty"`
	// Error is the last failure while down.
	Error string `json:"error,omitempty"`
}
