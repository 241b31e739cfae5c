package modbus

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// types are the tag types Modbus registers hold: routes.TagTypes but the
// 8-bit ones.
var types = slices.DeleteFunc(slices.Clone(routes.TagTypes), func(t string) bool { return t == "int8" || t == "uint8" })

// table is one of the four Modbus data tables.
type table string

const (
	holding  table = "holding"
	input    table = "input"
	coil     table = "coil"
	discrete table = "discrete"
)

// isBits reports whether the table holds single bits rather than registers.
func (t table) isBits() bool { return t == coil || t == discrete }

// Request size limits of the Modbus specification.
const (
	maxReadRegisters  = 125
	maxReadBits       = 2000
	maxWriteRegisters = 123
)

// tag is a parsed routes.Tag and its TagConfig.
type tag struct {
	name     string
	address  string // as configured, for error messages
	table    table
	start    uint16 // first register or bit
	count    int    // registers or bits
	typ      tagvalue.Type
	order    ByteOrder
	bit      int  // bit in a register for bool register tags, else -1
	unit     byte // the unit id of its group
	length   int  // bytes of a string: two per register
	scale    *float64
	offset   float64
	writable bool
}

// parseTag validates one tag against the device's defaults; the catalog
// has checked the rules of every tag (a name, a scale other than 0).
// Errors name the tag and the offending field and say what is expected.
func parseTag(tg *routes.Tag, devOrder ByteOrder) (*tag, error) {
	t := &tag{name: tg.Name, address: tg.Address, bit: -1, scale: tg.Scale, offset: tg.Offset, writable: tg.Writable, length: tg.Length}
	s, err := routes.SettingsOf[TagConfig](tg.Settings)
	if err != nil {
		return nil, fmt.Errorf("%w: tag %q: %v", ErrConfig, tg.Name, err)
	}
	tb, ok := parseRegister(s.Register)
	if !ok {
		return nil, fmt.Errorf("%w: tag %q: register %q: want holding, input, coil or discrete", ErrConfig, tg.Name, s.Register)
	}
	t.table = tb
	start, err := parseAddress(tg.Address)
	if err != nil {
		return nil, fmt.Errorf("%w: tag %q: address %q: want a 0-based register or bit number 0..65535 such as \"100\" or \"0x64\"", ErrAddress, tg.Name, tg.Address)
	}
	t.start = start
	t.order = devOrder
	if s.ByteOrder != "" {
		o, ok := parseOrder(s.ByteOrder)
		if !ok {
			return nil, fmt.Errorf("%w: tag %q: %v", ErrConfig, tg.Name, errOrder(s.ByteOrder))
		}
		t.order = o
	}
	typ := tagvalue.Type(strings.ToLower(strings.TrimSpace(tg.Type)))
	if typ == "" {
		typ = tagvalue.TypeUint16
		if t.table.isBits() || s.Bit != nil {
			typ = tagvalue.TypeBool
		}
	}
	t.typ = typ
	if t.table.isBits() {
		if typ != tagvalue.TypeBool {
			return nil, fmt.Errorf("%w: tag %q: type %q: a %s holds single bits, want bool", ErrConfig, tg.Name, tg.Type, t.table)
		}
		if s.Bit != nil {
			return nil, fmt.Errorf("%w: tag %q: bit applies to holding and input registers, not to a %s", ErrConfig, tg.Name, t.table)
		}
		t.count = 1
	} else {
		switch typ {
		case tagvalue.TypeBool:
			if s.Bit == nil || *s.Bit < 0 || *s.Bit > 15 {
				return nil, fmt.Errorf("%w: tag %q: a bool in a %s register needs bit 0..15", ErrConfig, tg.Name, t.table)
			}
			t.bit = *s.Bit
		case tagvalue.TypeInt16, tagvalue.TypeUint16, tagvalue.TypeInt32, tagvalue.TypeUint32, tagvalue.TypeInt64, tagvalue.TypeUint64, tagvalue.TypeFloat32, tagvalue.TypeFloat64:
		case tagvalue.TypeString:
			// length counts registers, two characters each, as the
			// configuration documents it.
			if tg.Length < 1 || tg.Length > maxWriteRegisters {
				return nil, fmt.Errorf("%w: tag %q: a string needs length 1..%d (registers of two characters)", ErrConfig, tg.Name, maxWriteRegisters)
			}
			t.length = 2 * tg.Length
		default:
			return nil, fmt.Errorf("%w: tag %q: type %q: want one of %s (registers hold no 8-bit types)", ErrConfig, tg.Name, tg.Type, strings.Join(types, ", "))
		}
		if s.Bit != nil && typ != tagvalue.TypeBool {
			return nil, fmt.Errorf("%w: tag %q: bit needs type bool, not %q", ErrConfig, tg.Name, typ)
		}
		t.count = registers(typ, t.length)
	}
	if (t.scale != nil || t.offset != 0) && (typ == tagvalue.TypeBool || typ == tagvalue.TypeString) {
		return nil, fmt.Errorf("%w: tag %q: scale and offset apply to numbers, not to %s", ErrConfig, tg.Name, typ)
	}
	if int(t.start)+t.count > 65536 {
		return nil, fmt.Errorf("%w: tag %q: address %q: %d registers from %d run past 65535", ErrAddress, tg.Name, tg.Address, t.count, t.start)
	}
	if t.writable && t.table != holding && t.table != coil {
		return nil, fmt.Errorf("%w: tag %q: a %s is read-only in Modbus; only holding registers and coils are writable", ErrConfig, tg.Name, t.table)
	}
	return t, nil
}

// request is one read covering one or more tags of one table of a unit.
type request struct {
	unit  byte
	table table
	start uint16
	count int
	tags  []int // indexes into the group's tags
}

// plan joins a group's tags into as few reads as the limits allow. Only
// adjacent or overlapping tags are joined: a gap could cover addresses the
// device does not map, and one exception would then fail every tag.
func plan(tags []*tag, merge bool) []request {
	idx := make([]int, len(tags))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ta, tb := tags[idx[a]], tags[idx[b]]
		if ta.table != tb.table {
			return ta.table < tb.table
		}
		return ta.start < tb.start
	})
	var reqs []request
	for _, i := range idx {
		t := tags[i]
		if merge && len(reqs) > 0 {
			r := &reqs[len(reqs)-1]
			limit := maxReadRegisters
			if t.table.isBits() {
				limit = maxReadBits
			}
			end := int(r.start) + r.count
			if r.unit == t.unit && r.table == t.table && int(t.start) <= end {
				newEnd := max(end, int(t.start)+t.count)
				if newEnd-int(r.start) <= limit {
					r.count = newEnd - int(r.start)
					r.tags = append(r.tags, i)
					continue
				}
			}
		}
		reqs = append(reqs, request{unit: t.unit, table: t.table, start: t.start, count: t.count, tags: []int{i}})
	}
	return reqs
}
