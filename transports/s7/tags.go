package s7

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// area is an S7 memory area code as it appears on the wire.
type area byte

const (
	areaI  area = 0x81
	areaQ  area = 0x82
	areaM  area = 0x83
	areaDB area = 0x84
)

func (a area) String() string {
	switch a {
	case areaI:
		return "I"
	case areaQ:
		return "Q"
	case areaM:
		return "M"
	}
	return "DB"
}

// sizes of the fixed-size types in bytes.
var sizes = map[tagvalue.Type]int{
	tagvalue.TypeBool: 1, tagvalue.TypeInt8: 1, tagvalue.TypeUint8: 1, tagvalue.TypeInt16: 2, tagvalue.TypeUint16: 2,
	tagvalue.TypeInt32: 4, tagvalue.TypeUint32: 4, tagvalue.TypeFloat32: 4, tagvalue.TypeInt64: 8, tagvalue.TypeUint64: 8, tagvalue.TypeFloat64: 8,
}

// typeAliases maps TIA type names to ours.
var typeAliases = map[string]tagvalue.Type{
	"byte": tagvalue.TypeUint8, "usint": tagvalue.TypeUint8, "sint": tagvalue.TypeInt8, "char": tagvalue.TypeUint8,
	"word": tagvalue.TypeUint16, "uint": tagvalue.TypeUint16, "int": tagvalue.TypeInt16,
	"dword": tagvalue.TypeUint32, "udint": tagvalue.TypeUint32, "dint": tagvalue.TypeInt32, "real": tagvalue.TypeFloat32,
	"lword": tagvalue.TypeUint64, "ulint": tagvalue.TypeUint64, "lint": tagvalue.TypeInt64, "lreal": tagvalue.TypeFloat64,
}

// maxString is the longest S7 STRING.
const maxString = 254

// tag is a parsed routes.Tag.
type tag struct {
	name    string
	address string
	area    area
	db      int
	start   int // first byte
	bit     int // bit of a bool, else -1
	size    int // bytes on the PLC, the STRING header included
	typ     tagvalue.Type
	strMax  int // declared length of a STRING
	scale   *float64
	offset  float64
}

var (
	reDB     = regexp.MustCompile(`^DB(\d+)\.DB([XBWDS])(\d+)(?:\.(\d+))?$`)
	reDBStr  = regexp.MustCompile(`^DB(\d+)\.(?:DB)?STRING(\d+)\.(\d+)$`)
	reArea   = regexp.MustCompile(`^([MIEQA])([XBWD]?)(\d+)(?:\.(\d+))?$`)
	addrForm = `want DB<n>.DBX<byte>.<bit>, DB<n>.DBB<byte>, DB<n>.DBW<byte>, DB<n>.DBD<byte>, DB<n>.DBS<byte> (with length) or DB<n>.STRING<byte>.<length>, or M, I (E) or Q (A) with X/B/W/D, e.g. M10.3, MW20, IB0, QD4`
)

// parseTag validates one tag; the catalog, or the configuration's common
// rules, have checked those of every tag (a name, a scale other than 0).
// Errors name the tag and the offending field and say what is expected.
func parseTag(tg *routes.Tag) (*tag, error) {
	t := &tag{name: tg.Name, address: tg.Address, bit: -1, scale: tg.Scale, offset: tg.Offset}
	if tg.Settings != nil {
		return nil, fmt.Errorf("%w: tag %q: settings %T are another kind's (such as Modbus's register or byte_order): an S7 address names its area and values are big-endian", ErrConfig, tg.Name, tg.Settings)
	}
	width, sub, err := t.parseAddress(tg)
	if err != nil {
		return nil, err
	}
	typ := tagvalue.Type(strings.ToLower(strings.TrimSpace(tg.Type)))
	if a, ok := typeAliases[string(typ)]; ok {
		typ = a
	}
	switch width {
	case "X":
		typ, err = t.bitType(tg, typ, sub)
	case "S":
		typ, err = t.stringType(tg, typ, sub)
	default:
		typ, err = t.wordType(tg, typ, width, sub)
	}
	if err != nil {
		return nil, err
	}
	t.typ = typ
	t.size = sizes[typ]
	if typ == tagvalue.TypeString {
		t.size = t.strMax + 2
	}
	if t.start+t.size > 65536 {
		return nil, badAddress(tg, "the value runs past byte 65535")
	}
	if (t.scale != nil || t.offset != 0) && (typ == tagvalue.TypeBool || typ == tagvalue.TypeString) {
		return nil, fmt.Errorf("%w: tag %q: scale and offset apply to numbers, not to %s", ErrConfig, tg.Name, typ)
	}
	return t, nil
}

// badAddress is an ErrAddress naming tg, its address and why.
func badAddress(tg *routes.Tag, why string) error {
	return fmt.Errorf("%w: tag %q: address %q: %s", ErrAddress, tg.Name, tg.Address, why)
}

// parseAddress sets t's area, DB and start byte from tg's address and
// returns its width letter (X, B, W, D, or S for a STRING) and what follows
// the byte: a bit, or a STRING's declared length.
func (t *tag) parseAddress(tg *routes.Tag) (width, sub string, err error) {
	addr := strings.ToUpper(strings.ReplaceAll(tg.Address, " ", ""))
	var num string
	switch {
	case reDBStr.MatchString(addr):
		m := reDBStr.FindStringSubmatch(addr)
		t.area, width, num, sub = areaDB, "S", m[2], m[3]
		t.db, _ = strconv.Atoi(m[1])
	case reDB.MatchString(addr):
		m := reDB.FindStringSubmatch(addr)
		t.area, width, num, sub = areaDB, m[2], m[3], m[4]
		t.db, _ = strconv.Atoi(m[1])
		if width == "S" {
			// DB<n>.DBS<byte> is a STRING whose declared length is the
			// tag's length.
			if sub != "" {
				return "", "", badAddress(tg, "a STRING address takes no .<bit>; give its length in length")
			}
			width, sub = "S", strconv.Itoa(tg.Length)
			if tg.Length < 1 || tg.Length > maxString {
				return "", "", fmt.Errorf("%w: tag %q: a STRING at %s needs length 1..%d (its declared length)", ErrConfig, tg.Name, tg.Address, maxString)
			}
		}
	case reArea.MatchString(addr):
		m := reArea.FindStringSubmatch(addr)
		t.area = map[string]area{"M": areaM, "I": areaI, "E": areaI, "Q": areaQ, "A": areaQ}[m[1]]
		width, num, sub = m[2], m[3], m[4]
		if width == "" {
			if sub == "" {
				return "", "", badAddress(tg, addrForm)
			}
			width = "X"
		}
	default:
		return "", "", badAddress(tg, addrForm)
	}
	if t.area == areaDB && (t.db < 1 || t.db > 65535) {
		return "", "", badAddress(tg, "DB number must be 1..65535")
	}
	if t.start, err = strconv.Atoi(num); err != nil || t.start > 65535 {
		return "", "", badAddress(tg, "byte offset must be 0..65535")
	}
	return width, sub, nil
}

// bitType sets t's bit from sub and checks typ for a bit address: a bool.
func (t *tag) bitType(tg *routes.Tag, typ tagvalue.Type, sub string) (tagvalue.Type, error) {
	var err error
	if sub == "" {
		return "", badAddress(tg, "a bit address needs .<bit>, e.g. DB1.DBX0.3")
	}
	if t.bit, err = strconv.Atoi(sub); err != nil || t.bit > 7 {
		return "", badAddress(tg, "bit must be 0..7")
	}
	if typ == "" {
		typ = tagvalue.TypeBool
	}
	if typ != tagvalue.TypeBool {
		return "", fmt.Errorf("%w: tag %q: type %q: a bit address holds a bool", ErrConfig, tg.Name, tg.Type)
	}
	return typ, nil
}

// stringType sets t's declared STRING length from sub and checks typ for
// a STRING address: a string.
func (t *tag) stringType(tg *routes.Tag, typ tagvalue.Type, sub string) (tagvalue.Type, error) {
	var err error
	t.strMax, err = strconv.Atoi(sub)
	if err != nil || t.strMax < 1 || t.strMax > maxString {
		return "", badAddress(tg, fmt.Sprintf("STRING length must be 1..%d", maxString))
	}
	if typ != "" && typ != tagvalue.TypeString {
		return "", fmt.Errorf("%w: tag %q: type %q: a STRING address holds a string", ErrConfig, tg.Name, tg.Type)
	}
	return tagvalue.TypeString, nil
}

// wordType checks typ for a byte, word or double-word address (B, W, D):
// its default is that width's unsigned integer, DBB may start a value of
// any size or a string of tg's length, DBW and DBD promise their width.
func (t *tag) wordType(tg *routes.Tag, typ tagvalue.Type, width, sub string) (tagvalue.Type, error) {
	if sub != "" {
		return "", badAddress(tg, "only a bit address (X) takes .<bit>")
	}
	def := map[string]tagvalue.Type{"B": tagvalue.TypeUint8, "W": tagvalue.TypeUint16, "D": tagvalue.TypeUint32}[width]
	if typ == "" {
		typ = def
	}
	if typ == tagvalue.TypeBool {
		return "", fmt.Errorf("%w: tag %q: a bool needs a bit address such as DB1.DBX0.0", ErrConfig, tg.Name)
	}
	if typ == tagvalue.TypeString {
		if width != "B" {
			return "", fmt.Errorf("%w: tag %q: a string needs a byte address (DB1.DBB10) or DB1.STRING10.<length>", ErrConfig, tg.Name)
		}
		t.strMax = tg.Length
		if t.strMax < 1 || t.strMax > maxString {
			return "", fmt.Errorf("%w: tag %q: a string needs length 1..%d", ErrConfig, tg.Name, maxString)
		}
		return typ, nil
	}
	if _, ok := sizes[typ]; !ok {
		return "", fmt.Errorf("%w: tag %q: type %q: want one of %s (or a TIA name such as INT, DINT, REAL, LREAL)", ErrConfig, tg.Name, tg.Type, strings.Join(routes.TagTypes, ", "))
	}
	if width != "B" && sizes[typ] != sizes[def] {
		// DBB only fixes the start, so it may begin a value of any
		// size; DBW and DBD promise a width.
		return "", fmt.Errorf("%w: tag %q: type %q is %d bytes but %s addresses %d; use DBB (or MB, IB, QB) to start a value of another size", ErrConfig, tg.Name, typ, sizes[typ], width, sizes[def])
	}
	return typ, nil
}

// span is a run of bytes of one area (and DB) that covers one or more tags
// and is read as one or more data items.
type span struct {
	area  area
	db    int
	start int
	size  int
	tags  []int // indexes into the group's tags
}

// spans joins tags whose bytes touch or overlap. Gaps are never read: bytes
// between tags may lie beyond the end of a DB and fail the whole item.
func spans(tags []*tag) []span {
	idx := make([]int, len(tags))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ta, tb := tags[idx[a]], tags[idx[b]]
		if ta.area != tb.area {
			return ta.area < tb.area
		}
		if ta.db != tb.db {
			return ta.db < tb.db
		}
		return ta.start < tb.start
	})
	var out []span
	for _, i := range idx {
		t := tags[i]
		if n := len(out); n > 0 {
			s := &out[n-1]
			if s.area == t.area && s.db == t.db && t.start <= s.start+s.size {
				s.size = max(s.size, t.start+t.size-s.start)
				s.tags = append(s.tags, i)
				continue
			}
		}
		out = append(out, span{area: t.area, db: t.db, start: t.start, size: t.size, tags: []int{i}})
	}
	return out
}

// Sizes of S7 telegram parts that bound a read by the PDU length.
const (
	maxItems       = 20 // items in one read job
	readReqHeader  = 19 // TPKT + COTP + S7 header + function and count, as gos7 counts it
	readItemSpec   = 12 // one variable specification
	readAckHeader  = 14 // S7 ack-data header + function and count
	readItemHeader = 4  // return code, transport size, length
	writeOverhead  = 35 // a single-item write job before its data
)

// chunk is one data item: part of a span.
type chunk struct {
	span   int // index into the group's spans
	offset int // from the span's start
	size   int
}

// pack cuts spans into items of at most pdu-18 bytes and packs the items
// into read jobs whose request and reply both fit the PDU, 20 items at
// most.
func pack(ss []span, pdu int) [][]chunk {
	maxData := pdu - readAckHeader - readItemHeader
	var jobs [][]chunk
	var cur []chunk
	reqSize, respSize := readReqHeader, readAckHeader
	for si, s := range ss {
		for off := 0; off < s.size; off += maxData {
			c := chunk{span: si, offset: off, size: min(maxData, s.size-off)}
			// Every item but the last is padded to an even length.
			cost := readItemHeader + c.size + c.size%2
			if len(cur) > 0 && (len(cur) == maxItems || reqSize+readItemSpec > pdu || respSize+cost > pdu) {
				jobs = append(jobs, cur)
				cur, reqSize, respSize = nil, readReqHeader, readAckHeader
			}
			cur = append(cur, c)
			reqSize += readItemSpec
			respSize += cost
		}
	}
	if len(cur) > 0 {
		jobs = append(jobs, cur)
	}
	return jobs
}
