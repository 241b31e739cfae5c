package routes

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Pin limits where a session runs: the nodes it may run on and the one it
// prefers. It is written on a device (the gateway cabled to it) or on a
// route; a session runs only on the nodes every pin of its routes and
// their devices allows.
type Pin struct {
	// Nodes are the eligible node names; empty means every node.
	Nodes []string `yaml:"nodes"`
	// PreferredNode, when set, is the node the session runs on while it
	// is up: while another node owns the session, the preferred node asks
	// for a planned handover to itself (one session at a time). It must
	// be one of nodes when nodes is set.
	PreferredNode string `yaml:"preferred_node"`
}

// Pinning is a session's effective pin.
type Pinning struct {
	// Nodes are the eligible nodes, sorted; nil means every node.
	Nodes []string `json:"nodes,omitempty"`
	// Preferred is the preferred node, or "".
	Preferred string `json:"preferred_node,omitempty"`
}

// Eligible reports whether node may run the session.
func (p Pinning) Eligible(node string) bool {
	return p.Nodes == nil || slices.Contains(p.Nodes, node)
}

// pinSource is one pin with the key path it is written at.
type pinSource struct {
	path string
	pin  Pin
}

// pinsOf lists the pins bearing on session, routes first in file order,
// then the devices they use. Empty pins, which allow every node and
// prefer none, are left out.
func (c *Config) pinsOf(session string) []pinSource {
	var out []pinSource
	devs := map[string]bool{}
	for i, r := range c.Routes {
		if r == nil || r.Session != session {
			continue
		}
		if !r.Pin.empty() {
			out = append(out, pinSource{fmt.Sprintf("routes[%d]", i), r.Pin})
		}
		if (r.Kind == RoutePoll || r.Kind == RouteWrite) && c.Devices[r.Device] != nil && !c.Devices[r.Device].Pin.empty() {
			devs[r.Device] = true
		}
	}
	for _, d := range sortedKeys(devs) {
		out = append(out, pinSource{"devices." + d, c.Devices[d].Pin})
	}
	return out
}

func (p Pin) empty() bool { return len(p.Nodes) == 0 && p.PreferredNode == "" }

// Pinning is session's effective pin: the intersection of every nodes
// list bearing on it and the preferred node they name.
func (c *Config) Pinning(session string) Pinning {
	var p Pinning
	for _, src := range c.pinsOf(session) {
		if len(src.pin.Nodes) > 0 {
			if p.Nodes == nil {
				p.Nodes = slices.Clone(src.pin.Nodes)
			} else {
				p.Nodes = slices.DeleteFunc(p.Nodes, func(n string) bool { return !slices.Contains(src.pin.Nodes, n) })
			}
		}
		if p.Preferred == "" {
			p.Preferred = src.pin.PreferredNode
		}
	}
	if p.Nodes != nil {
		sort.Strings(p.Nodes)
		p.Nodes = slices.Compact(p.Nodes)
	}
	return p
}

// checkNodeName refuses a node name that cannot be a key segment.
func checkNodeName(n string) error {
	if n == "" || strings.ContainsAny(n, "/ \t\n#") {
		return fmt.Errorf("node name %q: want a non-empty name without slashes, spaces or # (it is an etcd key segment and part of an owner identity)", n)
	}
	return nil
}

// checkPins validates every pin on its own, then each session's
// combination: the lists must leave an eligible node and agree on the
// preferred one.
func (c *Config) checkPins() Errors {
	var errs Errors
	add := func(p, format string, args ...any) { errs = append(errs, c.errAt(p, format, args...)) }
	var all []pinSource
	for _, name := range sortedKeys(c.Devices) {
		if d := c.Devices[name]; d != nil && !d.Pin.empty() {
			all = append(all, pinSource{"devices." + name, d.Pin})
		}
	}
	for i, r := range c.Routes {
		if r != nil && !r.Pin.empty() {
			all = append(all, pinSource{fmt.Sprintf("routes[%d]", i), r.Pin})
		}
	}
	for _, src := range all {
		seen := map[string]int{}
		for i, n := range src.pin.Nodes {
			p := fmt.Sprintf("%s.nodes[%d]", src.path, i)
			if err := checkNodeName(n); err != nil {
				add(p, "%v", err)
			} else if first, dup := seen[n]; dup {
				add(p, "node %q is listed twice (first at nodes[%d])", n, first)
			} else {
				seen[n] = i
			}
		}
		if pn := src.pin.PreferredNode; pn != "" {
			if err := checkNodeName(pn); err != nil {
				add(src.path+".preferred_node", "%v", err)
			} else if len(src.pin.Nodes) > 0 && !slices.Contains(src.pin.Nodes, pn) {
				add(src.path+".preferred_node", "preferred_node %q is not one of nodes [%s]: the session could never run there",
					pn, strings.Join(src.pin.Nodes, ", "))
			}
		}
	}
	// Without a pin every session may run anywhere: nothing to combine.
	if len(errs) > 0 || len(all) == 0 {
		return errs
	}
	sessions := map[string]bool{}
	for _, r := range c.Routes {
		if r != nil && r.Session != "" {
			sessions[r.Session] = true
		}
	}
	for _, s := range sortedKeys(sessions) {
		errs = append(errs, c.checkSessionPin(s)...)
	}
	return errs
}

func (c *Config) checkSessionPin(session string) Errors {
	var errs Errors
	srcs := c.pinsOf(session)
	eff := c.Pinning(session)
	var lists []string
	for _, src := range srcs {
		if len(src.pin.Nodes) > 0 {
			lists = append(lists, fmt.Sprintf("%s (%s) [%s]", src.path+".nodes", c.position(src.path+".nodes"), strings.Join(src.pin.Nodes, ", ")))
		}
	}
	if eff.Nodes != nil && len(eff.Nodes) == 0 {
		last := srcs[len(srcs)-1].path
		for _, src := range srcs {
			if len(src.pin.Nodes) > 0 {
				last = src.path
			}
		}
		errs = append(errs, c.errAt(last+".nodes", "session %q can run on no node: its nodes lists have no node in common: %s",
			session, strings.Join(lists, ", ")))
	}
	for _, src := range srcs {
		pn := src.pin.PreferredNode
		if pn == "" {
			continue
		}
		if pn != eff.Preferred {
			errs = append(errs, c.errAt(src.path+".preferred_node", "session %q: preferred_node %q here, %q earlier: the routes and devices of one session must agree",
				session, pn, eff.Preferred))
		} else if !eff.Eligible(pn) {
			errs = append(errs, c.errAt(src.path+".preferred_node", "session %q: preferred_node %q is not eligible: the nodes lists allow only [%s]: %s",
				session, pn, strings.Join(eff.Nodes, ", "), strings.Join(lists, ", ")))
		}
	}
	return errs
}
