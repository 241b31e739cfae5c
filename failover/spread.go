package failover

import (
	"hash/fnv"
	"maps"
	"slices"
	"sort"

	"github.com/leasebridge/leasebridge/lease"
	"github.com/leasebridge/leasebridge/routes"
)

// weight is the rendezvous weight of node for session: every node
// computes the same order from the same names.
func weight(session, node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(session))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	return h.Sum64()
}

// desiredOwners assigns sessions to nodes so that no node holds more than
// its share ceil(sessions / nodes) and as few sessions as possible move:
// a live eligible preferred node takes its sessions; a current owner
// keeps up to its share of what it owns (those it weighs most on); every
// other session goes, in name order, to the eligible node under its share
// it weighs most on (rendezvous hashing). eligible maps a session to the
// live nodes that may run it; current maps a session to its owner's node.
// Every node computes the same map from the same rows.
func desiredOwners(sessions []string, eligible map[string][]string, current map[string]string, pins func(string) routes.Pinning) map[string]string {
	nodes := map[string]bool{}
	for _, ns := range eligible {
		for _, n := range ns {
			nodes[n] = true
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	share := (len(sessions) + len(nodes) - 1) / len(nodes)
	load := map[string]int{}
	out := map[string]string{}
	ordered := slices.Clone(sessions)
	sort.Strings(ordered)
	assign := func(s, n string) { out[s] = n; load[n]++ }
	for _, s := range ordered {
		if p := pins(s).Preferred; p != "" && slices.Contains(eligible[s], p) {
			assign(s, p)
		}
	}
	kept := map[string][]string{}
	for _, s := range ordered {
		if n, ok := current[s]; ok && out[s] == "" && slices.Contains(eligible[s], n) {
			kept[n] = append(kept[n], s)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(kept)) {
		ss := kept[n]
		sort.SliceStable(ss, func(i, j int) bool { return weight(ss[i], n) > weight(ss[j], n) })
		for _, s := range ss {
			if load[n] < share {
				assign(s, n)
			}
		}
	}
	for _, s := range ordered {
		if out[s] != "" || len(eligible[s]) == 0 {
			continue
		}
		cands := slices.Clone(eligible[s])
		sort.Slice(cands, func(i, j int) bool { return weight(s, cands[i]) > weight(s, cands[j]) })
		pick := cands[0]
		for _, n := range cands {
			if load[n] < share {
				pick = n
				break
			}
		}
		assign(s, pick)
	}
	return out
}

// liveEligible maps every session to the live, undraining nodes whose row
// says they run it, judged like `leasebridge status` judges node rows.
func liveEligible(sessions []string, nodes map[string]lease.NodeRow, nowNS int64) map[string][]string {
	out := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		if n.Stopped || n.Draining || nowNS-n.RenewedAt > int64(n.TTL) {
			continue
		}
		for _, s := range sessions {
			if slices.Contains(n.Sessions, s) {
				out[s] = append(out[s], name)
			}
		}
	}
	return out
}

// takers names, for every session, the node that should take its row
// over: for a free row the one desiredOwners gives it now; for a held row
// the same when that is another node (the holder is over its share and
// that node will ask for it), otherwise the one desiredOwners would give
// it if the holder died, computed over the live nodes without the holder,
// the holder's sessions left out of the current owners. Every node
// computes the same map from the same rows, so after an owner dies one
// standby takes each row, and a row released for a pull goes to the
// puller: no session moves twice. holders maps a held session to its
// holder's node.
func takers(sessions []string, eligible map[string][]string, holders map[string]string, pins func(string) routes.Pinning) map[string]string {
	out := desiredOwners(sessions, eligible, holders, pins)
	if out == nil {
		out = map[string]string{}
	}
	byHolder := invert(holders)
	for _, x := range slices.Sorted(maps.Keys(byHolder)) {
		without := map[string][]string{}
		for s, ns := range eligible {
			without[s] = slices.DeleteFunc(slices.Clone(ns), func(n string) bool { return n == x })
		}
		rest := map[string]string{}
		for s, n := range holders {
			if n != x {
				rest[s] = n
			}
		}
		d := desiredOwners(sessions, without, rest, pins)
		for _, s := range byHolder[x] {
			if out[s] != "" && out[s] != x {
				continue
			}
			if t := d[s]; t != "" {
				out[s] = t
			} else {
				delete(out, s)
			}
		}
	}
	return out
}

// invert maps every holder node to its sessions.
func invert(holders map[string]string) map[string][]string {
	out := map[string][]string{}
	for s, n := range holders {
		out[n] = append(out[n], s)
	}
	return out
}
