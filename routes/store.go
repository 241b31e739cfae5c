package routes

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/internal/redact"
)

// etcd's own limits on a member's raft timing (go.etcd.io/etcd/server/v3
// embed.Config.Validate): it counts both in whole milliseconds, wants the
// election timeout at least 5 heartbeats and at most 50 s, and counts the
// election in whole heartbeat ticks.
const (
	// MinElectionHeartbeats is the fewest heartbeats an election timeout
	// may span.
	MinElectionHeartbeats = 5
	// MaxStoreElection is the longest election timeout etcd accepts.
	MaxStoreElection = 50 * time.Second
)

// StoreMembers reports whether the file makes the fleet its own lease
// store (lease_store.members is set).
func (c *Config) StoreMembers() bool { return len(c.LeaseStore.Members) > 0 }

// IsWitness reports whether the file is a witness's: it names store
// members and has no routes, so `leasebridge store` runs its member and
// `leasebridge run` has nothing to bridge.
func (c *Config) IsWitness() bool { return c.StoreMembers() && len(c.Routes) == 0 }

// Member returns the store member named name and its index, or -1.
func (c *Config) Member(name string) (StoreMember, int) {
	for i, m := range c.LeaseStore.Members {
		if m.Name == name {
			return m, i
		}
	}
	return StoreMember{}, -1
}

// StoreEndpoints are the lease store's client URLs: the members' when the
// fleet runs its own store, else lease_store.endpoints (empty on a
// standalone node with the embedded store).
func (c *Config) StoreEndpoints() []string {
	if !c.StoreMembers() {
		return c.LeaseStore.Endpoints
	}
	out := make([]string, len(c.LeaseStore.Members))
	for i, m := range c.LeaseStore.Members {
		out[i] = m.ClientURL
	}
	return out
}

// StoreWarnings are the lease store settings that are valid but weaker
// than they look: an even member count, whose quorum survives no more
// failures than one member fewer.
func (c *Config) StoreWarnings() Errors {
	n := len(c.LeaseStore.Members)
	if n == 0 || n%2 == 1 {
		return nil
	}
	quorum := n/2 + 1
	msg := fmt.Sprintf("%d members: a quorum is %d, so the store survives the loss of %d member(s), no more than %d members would", n, quorum, n-quorum, n-1)
	if n == 2 {
		msg = "2 members: a quorum is 2, so the loss of either member stops the store (every renew fails and every owner fences); add a witness, a third member without routes"
	}
	return Errors{c.errAt("lease_store.members", "%s", msg)}
}

// checkStore applies the rules of lease_store.members and the members'
// raft timing.
func (c *Config) checkStore() Errors {
	ls := &c.LeaseStore
	if !c.StoreMembers() {
		return nil
	}
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	if len(ls.Endpoints) > 0 {
		add("lease_store.endpoints", "endpoints and members are both set: with members the fleet is its own store and bridges use the members' client URLs; remove one")
	}
	names, urls := map[string]string{}, map[string]string{}
	for i, m := range ls.Members {
		p := fmt.Sprintf("lease_store.members[%d]", i)
		switch {
		case m.Name == "":
			add(p, "name is required: the node name of the gateway that runs this member")
		case strings.ContainsAny(m.Name, "=, \t\n/"):
			add(p+".name", "name %q: no '=', ',', '/' or spaces (etcd's initial cluster lists name=url pairs)", m.Name)
		case names[m.Name] != "":
			add(p+".name", "duplicate member name %q (first in %s)", m.Name, names[m.Name])
		default:
			names[m.Name] = p
		}
		for _, key := range []string{"peer_url", "client_url"} {
			v := m.PeerURL
			if key == "client_url" {
				v = m.ClientURL
			}
			errs = append(errs, c.checkMemberURL(p+"."+key, v, urls)...)
		}
	}
	errs = append(errs, c.checkStoreTiming()...)
	errs = append(errs, c.checkStoreTLS()...)
	if len(c.Routes) == 0 {
		if _, i := c.Member(c.Node); i < 0 {
			add("node", "node %q is not one of lease_store.members (%s): a file without routes is a witness's, and a witness runs the member of its node", c.Node, strings.Join(c.MemberNames(), ", "))
		}
	}
	return errs
}

// MemberNames are the store members' names, in file order.
func (c *Config) MemberNames() []string {
	out := make([]string, len(c.LeaseStore.Members))
	for i, m := range c.LeaseStore.Members {
		out[i] = m.Name
	}
	return out
}

// checkMemberURL checks one member URL: http or https, host and port, no
// path, plaintext only with plaintext: true, and used once in the file.
func (c *Config) checkMemberURL(path, v string, seen map[string]string) Errors {
	var errs Errors
	add := func(format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	u, err := url.Parse(v)
	switch {
	case v == "":
		add("required, such as https://10.0.0.1:2380 (peer) or https://10.0.0.1:2379 (client)")
		return errs
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" ||
		(u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "":
		add("%q: want https://host:port (http:// with plaintext: true), no path or user", redact.URL(v))
		return errs
	case u.Scheme == "http" && !c.LeaseStore.Plaintext:
		add("%q is plaintext: members use TLS with client certificates; write https://, or set lease_store.plaintext: true on a trusted, isolated network", redact.URL(v))
	case u.Scheme == "https" && c.LeaseStore.Plaintext:
		add("%q is https but lease_store.plaintext is true: write http:// or remove plaintext", redact.URL(v))
	}
	key := strings.ToLower(u.Host)
	if first, dup := seen[key]; dup {
		add("%s is also %s: every member URL needs its own host:port", u.Host, first)
	} else {
		seen[key] = path
	}
	return errs
}

// checkStoreTiming applies etcd's rules to heartbeat_interval and
// election_timeout, so a file etcd would refuse is refused here, at its
// line.
func (c *Config) checkStoreTiming() Errors {
	var errs Errors
	hb, el := c.LeaseStore.HeartbeatInterval.D(), c.LeaseStore.ElectionTimeout.D()
	add := func(key, format string, args ...any) {
		errs = append(errs, c.errAt("lease_store."+key, format, args...))
	}
	for key, d := range map[string]time.Duration{"heartbeat_interval": hb, "election_timeout": el} {
		if d <= 0 || d%time.Millisecond != 0 {
			add(key, "%s %s: etcd counts it in whole milliseconds above 0", key, d)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// A rule between the two keys is reported at the one written.
	pair := "election_timeout"
	if !c.Written("lease_store.election_timeout") {
		pair = "heartbeat_interval"
	}
	switch {
	case el < MinElectionHeartbeats*hb:
		add(pair, "election_timeout %s is less than %d x heartbeat_interval %s = %s: etcd refuses it (a follower would start elections between heartbeats)",
			el, MinElectionHeartbeats, hb, MinElectionHeartbeats*hb)
	case el > MaxStoreElection:
		add("election_timeout", "election_timeout %s: etcd accepts at most %s", el, MaxStoreElection)
	case el%hb != 0:
		add(pair, "election_timeout %s is not a multiple of heartbeat_interval %s: etcd counts it in whole heartbeats (%s), so write that",
			el, hb, el/hb*hb)
	}
	return errs
}

// checkStoreTLS requires, with https members, the member's certificate on
// a node that runs one (member_tls) and a client certificate on every
// node (tls, or member_tls on a member's node): members refuse clients
// without one.
func (c *Config) checkStoreTLS() Errors {
	ls := &c.LeaseStore
	if ls.Plaintext {
		if ls.MemberTLS != nil {
			return Errors{c.errAt("lease_store.member_tls", "member_tls is set but plaintext is true: remove one")}
		}
		return nil
	}
	var errs Errors
	_, member := c.Member(c.Node)
	if ls.MemberTLS != nil || member >= 0 {
		if !completeTLS(ls.MemberTLS) {
			errs = append(errs, c.errAt("lease_store.member_tls", "node %q runs a member over https: member_tls needs ca_file (the fleet CA), cert_file and key_file (its certificate, for server and client auth)", c.Node))
		}
	}
	if !completeTLS(ls.TLS) && !completeTLS(ls.MemberTLS) {
		errs = append(errs, c.errAt("lease_store.tls", "members over https require a client certificate: tls needs ca_file, cert_file and key_file (a certificate from the fleet CA)"))
	}
	return errs
}

func completeTLS(t *TLS) bool {
	return t != nil && t.CAFile != "" && t.CertFile != "" && t.KeyFile != ""
}

// StoreClientTLS is the TLS a bridge or a tool uses towards the members:
// lease_store.tls, else a member node's member_tls (its certificate is
// also a client certificate); nil in plaintext.
func (c *Config) StoreClientTLS() *TLS {
	switch {
	case c.LeaseStore.Plaintext:
		return nil
	case c.LeaseStore.TLS != nil:
		return c.LeaseStore.TLS
	}
	return c.LeaseStore.MemberTLS
}
