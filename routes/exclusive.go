package routes

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// A session's owner may run on any node, so two sessions must never reach
// one exclusive endpoint: their owners could hold it at once. The rules
// below refuse every way a file can make them do so.

// use is where a session first uses a device or broker: its first route by
// name.
type use struct {
	session string
	route   *Route
	index   int
}

// firstUses maps a name (a device, or a broker endpoint key) to one use per
// session, sorted by session name.
type firstUses map[string][]use

func (f firstUses) add(key string, u use) {
	for i, o := range f[key] {
		if o.session == u.session {
			if u.route.Name < o.route.Name {
				f[key][i] = u
			}
			return
		}
	}
	f[key] = append(f[key], u)
	sort.Slice(f[key], func(i, j int) bool { return f[key][i].session < f[key][j].session })
}

// exclusive returns, per session, the refusals for devices and endpoints
// it shares: one device used by two sessions, two device entries with one
// endpoint (in any sessions: each entry opens its own connection), and one
// MQTT broker endpoint and client id used by two sessions.
func (c *Config) exclusive() map[string][]string {
	out := map[string][]string{}
	refuse := func(msg string, sessions ...string) {
		for _, s := range slices.Compact(slices.Sorted(slices.Values(sessions))) {
			out[s] = append(out[s], msg)
		}
	}
	devices, brokers := firstUses{}, firstUses{}
	hosts := map[string]string{}
	for i, r := range c.Routes {
		u := use{session: r.Session, route: r, index: i}
		if d := c.Devices[r.Device]; d != nil && (r.Kind == RoutePoll || r.Kind == RouteWrite) {
			devices.add(r.Device, u)
		}
		for _, b := range []string{r.Broker, r.Remote} {
			if key, ok := c.brokerEndpoint(b, r.Session, hosts); ok && (b == r.Broker || r.Kind == RouteBridge) {
				brokers.add(key, u)
			}
		}
	}
	for _, name := range sortedKeys(devices) {
		us := devices[name]
		for _, u := range us[1:] {
			refuse(fmt.Sprintf("device %q (%s) is used by session %q (route %q, %s) and session %q (route %q, %s): their owners can be two nodes, two clients of one device; put both routes in one session to run them in one process",
				name, c.position("devices."+name), us[0].session, us[0].route.Name, c.where(us[0].index), u.session, u.route.Name, c.where(u.index)),
				us[0].session, u.session)
		}
	}
	byEndpoint := map[string][]string{}
	for _, name := range sortedKeys(devices) {
		if ep, err := c.Devices[name].Endpoint(); err == nil {
			byEndpoint[ep.ID] = append(byEndpoint[ep.ID], name)
		}
	}
	sessionsOf := func(device string) []string {
		var ss []string
		for _, u := range devices[device] {
			ss = append(ss, u.session)
		}
		return ss
	}
	for _, id := range sortedKeys(byEndpoint) {
		names := byEndpoint[id]
		for _, other := range names[1:] {
			first := names[0]
			refuse(fmt.Sprintf("devices %q (%s, session %s) and %q (%s, session %s) are both endpoint %s: each entry opens its own connection, two clients of one device; define the device once, as one entry holding every tag, and put every route using it in one session to run them in one process",
				first, c.position("devices."+first), strings.Join(sessionsOf(first), ", "), other, c.position("devices."+other), strings.Join(sessionsOf(other), ", "), id),
				append(sessionsOf(first), sessionsOf(other)...)...)
		}
	}
	for _, key := range sortedKeys(brokers) {
		us := brokers[key]
		for _, u := range us[1:] {
			refuse(fmt.Sprintf("session %q (route %q, %s) and session %q (route %q, %s) both connect to MQTT broker %s: the broker keeps one connection per client id and would disconnect one owner for the other; put both routes in one session, or give the broker a client_id with {session}",
				us[0].session, us[0].route.Name, c.where(us[0].index), u.session, u.route.Name, c.where(u.index), key),
				us[0].session, u.session)
		}
	}
	return out
}

// brokerEndpoint is the exclusive endpoint a session's connection to a
// broker occupies: the broker's host:port and the client id it resolves
// to for that session. Its listeners share one client-id space, so the
// scheme is left out. hosts keeps each broker's host:port ("" when its URL
// has none), which every route naming the broker needs.
func (c *Config) brokerEndpoint(name, session string, hosts map[string]string) (string, bool) {
	b := c.Brokers[name]
	if b == nil {
		return "", false
	}
	hp, ok := hosts[name]
	if !ok {
		if u, err := url.Parse(b.URL); err == nil {
			if host, port, _, err := HostPort(u.Host, ""); err == nil {
				hp = net.JoinHostPort(host, port)
			}
		}
		hosts[name] = hp
	}
	if hp == "" {
		return "", false
	}
	return fmt.Sprintf("%s with client id %q", hp, ClientID(b.ClientID, session, c.Node)), true
}

// ClientID fills a broker's client_id template, {session} with the
// session's name and {node} with the node's: the one place the template is
// expanded, so admission checks the id the broker will see.
// One pass, as strings.Replacer would, without building a replacer per
// call (admission expands it for every route).
func ClientID(template, session, node string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(template, '{')
		if i < 0 {
			if b.Len() == 0 {
				return template
			}
			b.WriteString(template)
			return b.String()
		}
		b.WriteString(template[:i])
		template = template[i:]
		switch {
		case strings.HasPrefix(template, "{session}"):
			b.WriteString(session)
			template = template[len("{session}"):]
		case strings.HasPrefix(template, "{node}"):
			b.WriteString(node)
			template = template[len("{node}"):]
		default:
			b.WriteByte('{')
			template = template[1:]
		}
	}
}
