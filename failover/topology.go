package failover

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// topology tells a standby whether its local broker sees the owner of a
// session with a bridge route. A standby that stays one for longer than
// the session's owner-death budget while the lease store answers is
// looking at a row another process owns (it would have taken a free or
// stale row within the budget), and that owner publishes a retained
// "active" or "serving" status on every broker it uses. When the local
// broker has none, the owner uses another broker: messages published to
// this one are not bridged (docs/bridged-data.md, topologies). One
// connection per local broker per process reads the status topics.
type topology struct {
	sv      *Supervisor
	watches map[string]*mqtt.StatusWatch // by broker name
	brokers map[*session][]string        // a watched session's local brokers
	tick    time.Duration

	mu      sync.Mutex
	suspect map[string]string // session -> why, while suspect
	warned  map[string]bool
}

func newTopology(sv *Supervisor) (*topology, error) {
	tp := &topology{sv: sv, watches: map[string]*mqtt.StatusWatch{}, brokers: map[*session][]string{},
		suspect: map[string]string{}, warned: map[string]bool{}, tick: time.Second}
	cfg := sv.o.Config
	byBroker := map[string][]string{}
	for _, s := range sv.sessions {
		if !slices.ContainsFunc(s.routes, func(r *routes.Route) bool { return r.Kind == routes.RouteBridge }) {
			continue
		}
		for _, r := range s.routes {
			if !slices.Contains(tp.brokers[s], r.Broker) {
				tp.brokers[s] = append(tp.brokers[s], r.Broker)
				byBroker[r.Broker] = append(byBroker[r.Broker], s.name)
			}
		}
		sv.o.Metrics.TopologySuspect.WithLabelValues(s.name).Set(0)
		tp.tick = min(tp.tick, s.report.Timing.RenewInterval)
	}
	for _, name := range slices.Sorted(maps.Keys(byBroker)) {
		w, err := mqtt.NewStatusWatch("mqtt:"+name, mqtt.Config{Broker: *cfg.Brokers[name], Node: sv.o.Node}, byBroker[name])
		if err != nil {
			return nil, err
		}
		tp.watches[name] = w
	}
	return tp, nil
}

// run keeps the watches and judges every session each tick until ctx
// ends.
func (tp *topology) run(ctx context.Context) {
	if tp == nil || len(tp.watches) == 0 {
		return
	}
	var wg sync.WaitGroup
	for name, w := range tp.watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				tp.sv.o.Logger.Warn("broker status watch", "broker", name, "err", err)
			}
		}()
	}
	defer wg.Wait()
	since := map[*session]time.Time{}
	t := time.NewTicker(tp.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for s := range tp.brokers {
			if s.State() != "standby" || !tp.sv.health.up.Load() {
				delete(since, s)
				tp.set(s, "")
				continue
			}
			if since[s].IsZero() {
				since[s] = time.Now()
			}
			if d := time.Since(since[s]); d >= s.report.OwnerDeath.Total {
				tp.set(s, tp.unseen(s, d))
			}
		}
	}
}

// unseen names the local brokers of s that carry no owner's status, or
// is empty.
func (tp *topology) unseen(s *session, standby time.Duration) string {
	var why []string
	for _, b := range tp.brokers[s] {
		m, ok := tp.watches[b].Latest(s.name)
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("broker %s: no status message", b))
		case m.State != mqtt.StateActive && m.State != mqtt.StateServing, m.Node == tp.sv.o.Node:
			why = append(why, fmt.Sprintf("broker %s: last status %q from node %s epoch %d", b, m.State, m.Node, m.Epoch))
		}
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("standby for %s (owner-death budget %s) and %s", admission.FormatSeconds(standby.Round(time.Millisecond)),
		admission.FormatSeconds(s.report.OwnerDeath.Total), strings.Join(why, "; "))
}

// set records the session's verdict: gauge, status, and the warning once
// per session.
func (tp *topology) set(s *session, why string) {
	tp.mu.Lock()
	prev := tp.suspect[s.name]
	first := why != "" && !tp.warned[s.name]
	if why == "" {
		delete(tp.suspect, s.name)
	} else {
		tp.suspect[s.name] = why
		tp.warned[s.name] = true
	}
	tp.mu.Unlock()
	v := 0.0
	if why != "" {
		v = 1
	}
	tp.sv.o.Metrics.TopologySuspect.WithLabelValues(s.name).Set(v)
	switch {
	case first:
		s.log.Warn("the local broker does not see the owner's messages: a non-clustered broker per node is not supported, see docs/topologies.md", "why", why)
	case prev != "" && why == "":
		s.log.Info("the local broker sees the session's owner, or this node owns it")
	}
}

// why is the session's suspicion, empty when there is none.
func (tp *topology) why(session string) string {
	if tp == nil {
		return ""
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.suspect[session]
}
