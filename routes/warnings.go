package routes

import (
	"fmt"
	"slices"
)

// Warnings are what admission lets through but an operator should see:
// a write route whose device has no writable tag, every one of whose
// requests would be refused (read_only). Each names the route's device
// key with its position.
func (c *Config) Warnings() Errors {
	var out Errors
	for i, r := range c.Routes {
		if r == nil || r.Kind != RouteWrite {
			continue
		}
		d := c.Devices[r.Device]
		if d == nil || writable(d) {
			continue
		}
		out = append(out, c.errAt(fmt.Sprintf("routes[%d].device", i),
			"write route %q: device %q has no tag with writable: true, so every write request would be refused; mark the tags it may write writable", r.Name, r.Device))
	}
	return out
}

func writable(d *Device) bool {
	return slices.ContainsFunc(d.Groups, func(g *PollGroup) bool {
		return g != nil && slices.ContainsFunc(g.Tags, func(t *Tag) bool { return t != nil && t.Writable })
	})
}
