package routes_test

import (
	"slices"
	"strings"
	"testing"
)

// A device pinned to its edge gateway and a route narrowing it further:
// the session runs only where both allow.
func TestPinningIntersectsDeviceAndRoute(t *testing.T) {
	y := exclusiveBase + device("press", "modbus_tcp", "10.0.0.5:502", ", nodes: [edge-1, edge-2, core], preferred_node: edge-1") +
		device("oven", "modbus_tcp", "10.0.0.6:502", "") + `routes:
  - {name: telemetry, session: press, kind: poll, device: press, broker: local, nodes: [edge-2, edge-1]}
  - {name: free, session: other, kind: poll, device: oven, broker: local}
`
	cfg, errs := parse(t, y)
	if errs != nil {
		t.Fatal(errs)
	}
	p := cfg.Pinning("press")
	if !slices.Equal(p.Nodes, []string{"edge-1", "edge-2"}) || p.Preferred != "edge-1" {
		t.Fatalf("pinning %+v, want nodes [edge-1 edge-2] preferred edge-1", p)
	}
	if !p.Eligible("edge-2") || p.Eligible("core") {
		t.Fatalf("eligible: edge-2 %v core %v", p.Eligible("edge-2"), p.Eligible("core"))
	}
	if o := cfg.Pinning("other"); o.Nodes != nil || !o.Eligible("anyone") {
		t.Fatalf("unpinned session: %+v", o)
	}
}

func TestPinningRefusalsNamePositions(t *testing.T) {
	for _, c := range []struct {
		devExtra, routeExtra, want string
	}{
		{", nodes: [edge-1], preferred_node: core", "", `cfg.yaml:7:71: devices.press.preferred_node: preferred_node "core" is not one of nodes [edge-1]`},
		{", nodes: [edge-1, edge-1]", "", `devices.press.nodes[1]: node "edge-1" is listed twice (first at nodes[0])`},
		{", nodes: [\"a/b\"]", "", `devices.press.nodes[0]: node name "a/b": want a non-empty name`},
		{", nodes: [edge-1]", ", nodes: [core]", `cfg.yaml:7:54: devices.press.nodes: session "press" can run on no node: its nodes lists have no node in common: routes[0].nodes (cfg.yaml:9) [core], devices.press.nodes (cfg.yaml:7) [edge-1]`},
		{", nodes: [edge-1, core], preferred_node: edge-1", ", preferred_node: core", `devices.press.preferred_node: session "press": preferred_node "edge-1" here, "core" earlier`},
		{", nodes: [edge-1]", ", preferred_node: core", `session "press": preferred_node "core" is not eligible: the nodes lists allow only [edge-1]`},
	} {
		y := exclusiveBase + device("press", "modbus_tcp", "10.0.0.5:502", c.devExtra) + "routes:\n  - {name: telemetry, session: press, kind: poll, device: press, broker: local" + c.routeExtra + "}\n"
		_, errs := parse(t, y)
		if errs == nil || !strings.Contains(errs.Error(), c.want) {
			t.Errorf("device %q route %q: errors %v, want one containing %q", c.devExtra, c.routeExtra, errs, c.want)
		}
	}
}
