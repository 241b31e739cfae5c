package transports

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

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
	names    map[string][]string // each group's tag names in order
}

// CheckKind refuses to build a transport of kind from dev when dev is nil
// or a device of another kind, with errs.Config naming the transport.
func CheckKind(name string, dev *routes.Device, kind string, errs DeviceErrors) error {
	if dev == nil {
		return fmt.Errorf("%w: transport %q: no device", errs.Config, name)
	}
	if dev.Kind != kind {
		return fmt.Errorf("%w: device %q: kind %q, want %s", errs.Config, name, dev.Kind, kind)
	}
	return nil
}

// NewCatalog parses dev's groups in order: parse turns each tag that
// passed the rules of every tag (checkTag) into T, then group builds G
// from the group and its tags. A group or tag name used twice, and a
// group mode not in modes ("" is poll), are refused naming the device and
// group.
func NewCatalog[G, T any](device string, dev *routes.Device, modes []string, errs DeviceErrors,
	parse func(*routes.Tag) (T, error), group func(pg *routes.PollGroup, tags []T) G) (*Catalog[G, T], error) {
	c := &Catalog[G, T]{device: device, errs: errs, groups: map[string]G{}, tags: map[string]T{}, writable: map[string]bool{}, names: map[string][]string{}}
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
			err := checkTag(tg, errs)
			var pt T
			if err == nil {
				pt, err = parse(tg)
			}
			if err != nil {
				return nil, fmt.Errorf("device %q: group %q: %w", device, pg.Name, err)
			}
			if _, dup := c.tags[tg.Name]; dup {
				return nil, fmt.Errorf("%w: device %q: tag %q defined twice", errs.Config, device, tg.Name)
			}
			c.tags[tg.Name], c.writable[tg.Name] = pt, tg.Writable
			c.names[pg.Name] = append(c.names[pg.Name], tg.Name)
			tags = append(tags, pt)
		}
		c.groups[pg.Name] = group(pg, tags)
	}
	return c, nil
}

// checkTag applies the rules of a tag of any kind, which its transport's
// parser then need not repeat: it has a name, and a scale other than 0.
func checkTag(tg *routes.Tag, errs DeviceErrors) error {
	switch {
	case tg.Name == "":
		return fmt.Errorf("%w: a tag at address %q has no name", errs.Config, tg.Address)
	case tg.Scale != nil && *tg.Scale == 0:
		return fmt.Errorf("%w: tag %q: scale 0 would make every value the offset and writes impossible", errs.Config, tg.Name)
	}
	return nil
}

// Group returns the poll group name and one Bad value per tag, in order,
// for a poll to fill in.
func (c *Catalog[G, T]) Group(name string) (G, []Value, error) {
	g, ok := c.groups[name]
	if !ok {
		return g, nil, fmt.Errorf("%w %q on device %q", c.errs.UnknownGroup, name, c.device)
	}
	vals := make([]Value, len(c.names[name]))
	for i, n := range c.names[name] {
		vals[i] = Value{Tag: n, Quality: Bad}
	}
	return g, vals, nil
}

// FailUnread gives every value not yet read (Bad without an error) err,
// stamped now, and returns vals and err: a poll that lost its device.
func FailUnread(vals []Value, err error) ([]Value, error) {
	now := time.Now()
	for i := range vals {
		if vals[i].Quality == Bad && vals[i].Err == nil {
			vals[i].Err, vals[i].Timestamp = err, now
		}
	}
	return vals, err
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
