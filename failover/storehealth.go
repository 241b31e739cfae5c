package failover

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/lease"
)

// ProbesPerRenewInterval is how many store probes the process sends per
// renew_interval (the smallest among its sessions). A lost store shows
// within one probe period plus renew_call_timeout; probing more often than
// once per renew_interval leaves the rest of StoreDetectionBound as slack
// for a loaded machine, for one cheap call per period per process.
const ProbesPerRenewInterval = 4

// storeHealth probes the lease store for the whole process: one cheap
// linearizable call every renew_interval / ProbesPerRenewInterval, bounded
// by renew_call_timeout (the smallest of each among the sessions), so a
// lost store shows on the gauge, /readyz and the log within
// StoreDetectionBound of the cut, also on a node that owns nothing and so
// renews nothing.
type storeHealth struct {
	store             lease.Store
	key               string // read when the store is not a lease.Pinger
	interval, timeout time.Duration
	endpoints         []string // redacted
	raw               []string // as configured, to scrub errors
	log               *slog.Logger
	gauge             prometheus.Gauge

	up atomic.Bool
	// Only the probing goroutine uses these.
	probed    bool
	downSince time.Time
}

// StoreDetectionBound is how long after the lease store becomes
// unreachable the process reports it: one renew_interval plus one
// renew_call_timeout, the smallest of each among reports.
func StoreDetectionBound(reports []admission.Report) time.Duration {
	interval, timeout := probeCadence(reports)
	return interval + timeout
}

// probeCadence is the smallest renew_interval and renew_call_timeout
// among reports.
func probeCadence(reports []admission.Report) (interval, timeout time.Duration) {
	for i, r := range reports {
		if i == 0 || r.Timing.RenewInterval < interval {
			interval = r.Timing.RenewInterval
		}
		if i == 0 || r.Timing.RenewCallTimeout < timeout {
			timeout = r.Timing.RenewCallTimeout
		}
	}
	return interval, timeout
}

func newStoreHealth(o Options) *storeHealth {
	h := &storeHealth{store: o.Store, endpoints: redactEndpoints(o.StoreEndpoints), raw: o.StoreEndpoints,
		log: o.Logger, gauge: o.Metrics.StoreUp}
	h.interval, h.timeout = probeCadence(o.Reports)
	h.interval /= ProbesPerRenewInterval
	if len(o.Reports) > 0 {
		h.key = o.Reports[0].Session
	}
	h.gauge.Set(0)
	return h
}

// run probes until ctx ends; the first probe is at once.
func (h *storeHealth) run(ctx context.Context) {
	if h.interval <= 0 || h.timeout <= 0 {
		return // no session: nothing to probe for
	}
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		start := time.Now()
		err := h.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		h.record(err, start)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *storeHealth) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	if p, ok := h.store.(lease.Pinger); ok {
		return p.Ping(ctx)
	}
	_, _, err := h.store.ReadAuthoritative(ctx, h.key)
	return err
}

// record moves the gauge and logs one line per change: when the store is
// lost (or unreachable from the start) and when it answers again.
func (h *storeHealth) record(err error, start time.Time) {
	first := !h.probed
	h.probed = true
	switch {
	case err == nil && (first || !h.up.Load()):
		if !first {
			h.log.Info("lease store reachable again", "endpoints", h.endpoints,
				"down_for", time.Since(h.downSince).Round(time.Millisecond).String())
		}
		h.up.Store(true)
		h.gauge.Set(1)
	case err != nil && (first || h.up.Load()):
		h.downSince = start
		h.up.Store(false)
		h.gauge.Set(0)
		h.log.Error("lease store unreachable: not ready; sessions cannot renew or take over", "endpoints", h.endpoints,
			"err", scrub(err.Error(), h.raw), "probe_every", h.interval.String(), "probe_timeout", h.timeout.String())
	}
}

// redactEndpoints hides any password inside an endpoint URL.
func redactEndpoints(eps []string) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e
		if u, err := url.Parse(e); err == nil && u.User != nil {
			out[i] = u.Redacted()
		}
	}
	return out
}

// scrub removes the user information of every endpoint from msg.
func scrub(msg string, eps []string) string {
	for _, e := range eps {
		if u, err := url.Parse(e); err == nil && u.User != nil {
			msg = strings.ReplaceAll(msg, u.User.String()+"@", "xxxxx@")
		}
	}
	return msg
}
