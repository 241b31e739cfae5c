package dataplane

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// topicFor fills a poll route's topic template.
func topicFor(r *routes.Route, group, tag string) string {
	return strings.NewReplacer("{session}", r.Session, "{device}", r.Device, "{group}", group, "{tag}", tag).Replace(r.Topic)
}

// poller publishes one poll group of one poll route.
type poller struct {
	t     *Term
	route *routes.Route
	group *routes.PollGroup
	dev   transports.Poller
	local Publisher
	// tags is what the poller keeps per tag, in one map: small Go maps
	// reserve room for eight entries, and one map per kind of state cost a
	// process of 1,000 single-tag sessions about a kilobyte per poller.
	tags   map[string]*tagState
	onGood func()
	// failing remembers an ongoing poll or publish failure, so it is
	// logged when it starts and when it ends rather than every cycle;
	// made at the first failure.
	failing map[string]bool
	// kick polls at once (set by start).
	kick func()
	// polled and published count the route's values (Counters.Values).
	polled, published Counter
}

// tagState is what a poller keeps for one tag.
type tagState struct {
	band float64 // the tag's deadband
	// topic caches the tag's topic: filling the template per value cost a
	// third of the data plane's time. Empty until first used.
	topic string
	// last is the value last seen, when seen.
	last transports.Value
	seen bool
}

// newPoller is the poller of one poll group of route r.
func newPoller(t *Term, r *routes.Route, g *routes.PollGroup, dev transports.Poller, onGood func()) *poller {
	p := &poller{t: t, route: r, group: g, dev: dev, local: t.Brokers[r.Broker], onGood: onGood,
		tags: make(map[string]*tagState, len(g.Tags))}
	for _, tag := range g.Tags {
		p.tags[tag.Name] = &tagState{band: tag.Deadband}
	}
	return p
}

// tag is the state of the named tag, made for a tag the group does not
// list.
func (p *poller) tag(name string) *tagState {
	st, ok := p.tags[name]
	if !ok {
		st = &tagState{}
		p.tags[name] = st
	}
	return st
}

// topic returns the tag's topic.
func (p *poller) topic(tag string) string {
	st := p.tag(tag)
	if st.topic == "" {
		st.topic = topicFor(p.route, p.group.Name, tag)
	}
	return st.topic
}

// report logs the start and the end of a failure of op; err nil means op
// succeeded.
func (p *poller) report(op string, err error, attrs ...any) {
	log := p.t.spec.Env.Log()
	switch {
	case err != nil && !p.failing[op]:
		if p.failing == nil {
			p.failing = map[string]bool{}
		}
		p.failing[op] = true
		log.Warn(op+" failing", append(attrs, "route", p.route.Name, "group", p.group.Name, "err", err)...)
	case err == nil && p.failing[op]:
		p.failing[op] = false
		log.Info(op+" recovered", append(attrs, "route", p.route.Name, "group", p.group.Name)...)
	}
}

// start polls at once and then at the group's interval until ctx ends;
// wg counts the poller until its last poll has returned. Before every
// device request it checks that the term may still do I/O: a process that
// was frozen or suspended past its fence deadline must not send. Between
// polls no goroutine waits: a timer starts the next poll, so an idle
// session keeps no poller stack (a process holds thousands).
func (p *poller) start(ctx context.Context, valid func() bool, wg *sync.WaitGroup) {
	interval := p.group.Interval.D()
	var (
		mu               sync.Mutex
		timer            *time.Timer
		stopped, running bool
		again            bool // kicked while polling: poll again at once
		tick             func()
	)
	tick = func() {
		if ctx.Err() != nil || !valid() {
			wg.Done()
			return
		}
		mu.Lock()
		running = true
		mu.Unlock()
		begun := time.Now()
		p.once(ctx)
		mu.Lock()
		defer mu.Unlock()
		running = false
		if stopped || ctx.Err() != nil {
			wg.Done()
			return
		}
		// As a ticker would: an overrun starts the next poll at once.
		next := max(0, interval-time.Since(begun))
		if again {
			again, next = false, 0
		}
		timer = time.AfterFunc(next, tick)
	}
	// kick polls now, for a transport that pushed a value: the poll
	// returns it (and the rest of the group) at once rather than at the
	// next interval.
	p.kick = func() {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case stopped, timer == nil:
		case running:
			again = true
		case timer.Stop():
			timer = time.AfterFunc(0, tick)
		}
	}
	wg.Add(1)
	mu.Lock()
	timer = time.AfterFunc(0, tick)
	mu.Unlock()
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		// A stopped timer never runs tick, which would count the poller
		// done; a timer that fired already has tick see ctx end.
		if timer.Stop() {
			wg.Done()
		}
	})
}

func (p *poller) once(ctx context.Context) {
	env := p.t.spec.Env
	vals, err := p.dev.Poll(ctx, p.group.Name)
	if ctx.Err() != nil {
		return
	}
	p.report("poll", err)
	env.Device(p.route.Device, err, time.Now())
	if err == nil {
		p.polled.Add(float64(len(vals)))
	} else {
		env.TransportError(p.dev.Name(), "poll")
		// The device is gone: every tag of the group is published as bad
		// on every failed poll (docs/mqtt.md), so consumers see the outage.
		vals = p.badValues(vals, err)
	}
	good, sent := false, 0
	var pubErr error
	// Counted once per poll: one atomic add, whatever the group's size.
	defer func() { p.published.Add(float64(sent)) }()
	for _, v := range vals {
		if !p.changed(v) && err == nil {
			if v.Quality == transports.Good {
				good = true
			}
			continue
		}
		if err := p.local.PublishValue(ctx, p.topic(v.Tag), byte(p.route.QoS), p.route.Retain, v); err != nil {
			if ctx.Err() != nil {
				return
			}
			env.TransportError(p.local.Name(), "publish")
			pubErr = err
			p.tag(v.Tag).seen = false // publish it again next time
			continue
		}
		sent++
		if v.Quality == transports.Good {
			good = true
		}
	}
	p.report("publish", pubErr)
	if good {
		p.onGood()
	}
}

// badValues is every tag of the group with bad quality and the poll's
// error, keeping a value the transport returned bad itself.
func (p *poller) badValues(vals []transports.Value, err error) []transports.Value {
	now := time.Now()
	out := make([]transports.Value, 0, len(p.group.Tags))
	for _, tag := range p.group.Tags {
		v := transports.Value{Tag: tag.Name, Quality: transports.Bad, Err: err, Timestamp: now}
		for _, got := range vals {
			if got.Tag == tag.Name && got.Quality == transports.Bad && got.Err != nil {
				v = got
			}
		}
		out = append(out, v)
	}
	return out
}

// changed decides whether v is published: always with every_poll, and
// with on_change when the quality changed or the value moved past the
// tag's deadband (transports.Moved). It records v.
func (p *poller) changed(v transports.Value) bool {
	st := p.tag(v.Tag)
	prev, seen := st.last, st.seen
	st.last, st.seen = v, true
	if !seen || p.route.Publish == "every_poll" || prev.Quality != v.Quality {
		return true
	}
	return transports.Moved(prev.Value, v.Value, st.band)
}
