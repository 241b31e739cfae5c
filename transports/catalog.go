package transports

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/leasebridge/leasebridge/routes"
)

// Catalog is a device's poll groups (G) and tags (T) as its transport
// parsed them: the checks every device transport makes of its
// configuration's groups and tags, and the lookups of Poll and Write.
type Catalog[G, T any] struct {
	device   string
	errs     DeviceErrors
	groups   map[string]G
	tags     map[string]T
	writable map[string]bool
}

// NewCatalog parses dev's groups in order: parse turns each tag into T,
// then group builds G from the group and its tags. A group or tag name
// used twice, and a group mode not in modes ("" is poll), are refused
// naming the device and group.
func NewCatalog[G, T any](device string, dev *routes.Device, modes []string, errs DeviceErrors,
	parse func(*routes.Tag) (T, error), group func(pg *routes.PollGroup, tags []T) G) (*Catalog[G, T], error) {
	c := &Catalog[G, T]{device: device, errs: errs, groups: map[string]G{}, tags: map[string]T{}, writable: map[string]bool{}}
	for _, pg := range dev.Groups {
		if pg == nil {
			continue
		}
		if _, dup := c.groups[pg.Name]; dup {
			return nil, fmt.Errorf("%w: device %q: poll group %q defined twice", errs.Config, device, pg.Name)
		}
		if mode := cmp.Or(pg.Mode, "poll"); !slices.Contains(modes, mode) {
			return nil, fmt.Errorf("%w: device %q: group %q: mode %q: want %s", errs.Config, device, pg.Name, pg.Mode, strings.Join(modes, " or "))
		}
		var tags []T
		for _, tg := range pg.Tags {
			if tg == nil {
				continue
			}
			pt, err := parse(tg)
			if err != nil {
				return nil, fmt.Errorf("device %q: group %q: %w", device, pg.Name, err)
			}
			if _, dup := c.tags[tg.Name]; dup {
				return nil, fmt.Errorf("%w: device %q: tag %q defined twice", errs.Config, device, tg.Name)
			}
			c.tags[tg.Name], c.writable[tg.Name] = pt, tg.Writable
			tags = append(tags, pt)
		}
		c.groups[pg.Name] = group(pg, tags)
	}
	return c, nil
}

// Group returns the poll group name.
func (c *Catalog[G, T]) Group(name string) (G, error) {
	g, ok := c.groups[name]
	if !ok {
		return g, fmt.Errorf("%w %q on device %q", c.errs.UnknownGroup, name, c.device)
	}
	return g, nil
}

// Writable returns the tag name for a write: it must exist and be marked
// writable.
func (c *Catalog[G, T]) Writable(name string) (T, error) {
	tg, ok := c.tags[name]
	switch {
	case !ok:
		return tg, fmt.Errorf("%w %q on device %q", c.errs.UnknownTag, name, c.device)
	case !c.writable[name]:
		return tg, fmt.Errorf("%w: tag %q on device %q (set writable: true)", c.errs.ReadOnly, name, c.device)
	}
	return tg, nil
}
