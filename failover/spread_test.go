package failover

import (
	"fmt"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
)

func noPins(string) routes.Pinning { return routes.Pinning{} }

func eligibleOn(sessions []string, nodes ...string) map[string][]string {
	out := map[string][]string{}
	for _, s := range sessions {
		out[s] = nodes
	}
	return out
}

// sessionNames are n sessions named s00, s01, ...
func sessionNames(n int) []string {
	var ss []string
	for i := range n {
		ss = append(ss, fmt.Sprintf("s%02d", i))
	}
	return ss
}

func loads(m map[string]string) map[string]int {
	out := map[string]int{}
	for _, n := range m {
		out[n]++
	}
	return out
}

func moves(a, b map[string]string) int {
	n := 0
	for s, o := range a {
		if b[s] != o {
			n++
		}
	}
	return n
}

// 30 sessions on 3 nodes: 10 each from a cold start and from one node
// owning everything; a node leaving moves only its 10, and coming back
// moves exactly 10 back.
func TestDesiredOwnersFairShareMinimumMoves(t *testing.T) {
	ss := sessionNames(30)
	three := eligibleOn(ss, "a", "b", "c")
	cold := desiredOwners(ss, three, nil, noPins)
	all := map[string]string{}
	for _, s := range ss {
		all[s] = "a"
	}
	fromA := desiredOwners(ss, three, all, noPins)
	for _, m := range []map[string]string{cold, fromA} {
		if l := loads(m); l["a"] != 10 || l["b"] != 10 || l["c"] != 10 {
			t.Fatalf("loads %v, want 10 each", l)
		}
	}
	if n := moves(all, fromA); n != 20 {
		t.Errorf("from one owner of 30: %d moves, want 20", n)
	}
	// c leaves: only its sessions move.
	left := desiredOwners(ss, eligibleOn(ss, "a", "b"), cold, noPins)
	if n := moves(cold, left); n != 10 {
		t.Errorf("c left: %d moves, want 10", n)
	}
	if l := loads(left); l["a"] != 15 || l["b"] != 15 {
		t.Errorf("after c left: loads %v, want 15 each", l)
	}
	back := desiredOwners(ss, three, left, noPins)
	if n := moves(left, back); n != 10 {
		t.Errorf("c back: %d moves, want 10", n)
	}
	if l := loads(back); l["a"] != 10 || l["b"] != 10 || l["c"] != 10 {
		t.Errorf("after c came back: loads %v, want 10 each", l)
	}
	// Stable: the same view gives the same map.
	if n := moves(back, desiredOwners(ss, three, back, noPins)); n != 0 {
		t.Errorf("a settled map moves %d sessions", n)
	}
}

// Pins: a session eligible only on c goes to c even over its share; a
// preferred node takes its session; no eligible node, no entry.
func TestDesiredOwnersHonoursPins(t *testing.T) {
	ss := []string{"p", "q", "r", "x"}
	el := map[string][]string{"p": {"c"}, "q": {"a", "b", "c"}, "r": {"a", "b", "c"}}
	pins := func(s string) routes.Pinning {
		if s == "q" {
			return routes.Pinning{Preferred: "b"}
		}
		return routes.Pinning{}
	}
	m := desiredOwners(ss, el, nil, pins)
	if m["p"] != "c" || m["q"] != "b" || m["x"] != "" {
		t.Fatalf("desired %v: want p on c, q on b, x nowhere", m)
	}
}

// takers: a held row's taker is where the assignment without its holder
// puts it, so after c dies a and b take exactly c's sessions, 15 each, and
// the assignment afterwards moves nothing more; a free row's taker is its
// desired owner now.
func TestTakersIfTheHolderDies(t *testing.T) {
	ss := sessionNames(30)
	three := eligibleOn(ss, "a", "b", "c")
	even := desiredOwners(ss, three, nil, noPins)
	take := takers(ss, three, even, noPins)
	after := map[string]string{}
	for s, n := range even {
		after[s] = n
		if n == "c" {
			after[s] = take[s]
		}
		if take[s] == n || take[s] == "" {
			t.Fatalf("%s held by %s: taker %q", s, n, take[s])
		}
	}
	if l := loads(after); l["a"] != 15 || l["b"] != 15 {
		t.Fatalf("after c's takers took over: loads %v, want 15 each", l)
	}
	if n := moves(after, desiredOwners(ss, eligibleOn(ss, "a", "b"), after, noPins)); n != 0 {
		t.Errorf("after the takeovers spread moves %d more sessions", n)
	}
	free := map[string]string{}
	for s, n := range even {
		if n != "a" {
			free[s] = n
		}
	}
	cold := takers(ss, three, free, noPins)
	want := desiredOwners(ss, three, free, noPins)
	for s, n := range even {
		if n == "a" && cold[s] != want[s] {
			t.Errorf("free %s: taker %q, want the desired owner %q", s, cold[s], want[s])
		}
	}
	if len(takers(ss, nil, even, noPins)) != 0 {
		t.Error("no live node: takers named one")
	}
}
