package routes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/leasebridge/leasebridge/admission"
)

// ErrInvalid reports a configuration that cannot be used as written; the
// returned *Errors lists every problem with its position.
var ErrInvalid = errors.New("routes: invalid configuration")

// FieldError is one problem at one place of a configuration file.
type FieldError struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	// Path is the key path, such as routes[2].manager.lease_ttl.
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error is file:line:column (the file alone without a line), the key
// path when there is one, and the message.
func (e *FieldError) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
	}
	if e.Path == "" {
		return pos + ": " + e.Message
	}
	return pos + ": " + e.Path + ": " + e.Message
}

// Errors is every problem found in one configuration, in file order.
type Errors []*FieldError

// MaxProblems is how many problems a report of one file lists, in file
// order; the rest are counted, not listed. A generated file with half a
// million unknown keys is answered at once, and its first problems are
// what to fix first.
const MaxProblems = 100

// MaxMessage bounds, in bytes, one problem's message as reported: values
// quoted from the file are clipped to MaxEcho bytes where the message is
// made, and this catches any message built elsewhere (a transport's error
// quoting its input).
const MaxMessage = 2048

// Shown is what a report lists of es: the first MaxProblems problems, each
// message clipped to MaxMessage bytes, and how many more there are.
func (es Errors) Shown() (Errors, int) {
	n := min(len(es), MaxProblems)
	shown := make(Errors, n)
	for i, e := range es[:n] {
		shown[i] = e
		if len(e.Message) > MaxMessage {
			c := *e
			c.Message = clipTo(e.Message, MaxMessage)
			shown[i] = &c
		}
	}
	return shown, len(es) - n
}

// MoreProblems is the line that ends a report listing Shown's problems
// when more was left out.
func MoreProblems(more int) string {
	return fmt.Sprintf("... and %d more problem(s), not listed (the first %d are, in file order)", more, MaxProblems)
}

// Error is the problems Shown lists, one a line, and how many more there
// are.
func (es Errors) Error() string {
	shown, more := es.Shown()
	parts := make([]string, len(shown), len(shown)+1)
	for i, e := range shown {
		parts[i] = e.Error()
	}
	if more > 0 {
		parts = append(parts, MoreProblems(more))
	}
	return strings.Join(parts, "\n")
}

// Is makes errors.Is(err, ErrInvalid) hold for any Errors.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

// Load reads and decodes the configuration at path. Only that file is read.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("routes: read config %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse decodes a configuration strictly: unknown keys, duplicate keys,
// wrong types and bad durations are errors naming file:line and the key
// path. Every problem is reported, not only the first. Defaults are applied
// and the result is validated.
func Parse(file string, data []byte) (*Config, error) {
	// A compact file (bench/admit_test.go's) has a key path per 14 bytes:
	// sized for one per 12, the map does not grow while a large file is
	// decoded.
	d := &decoder{file: file, lines: make(map[string]pos, len(data)/12)}
	cfg := &Config{File: file}
	root, fe := parseDocument(file, data)
	if fe != nil {
		return nil, Errors{fe}
	}
	if root == nil {
		d.errorf(nil, "", "the configuration is empty")
		return nil, d.errs
	}
	d.decode(root, reflect.ValueOf(cfg).Elem(), "")
	// Defaults need the positions: an explicitly written zero is kept.
	cfg.positions = d.lines
	cfg.applyDefaults()
	// Validation runs even when decoding failed, so one run reports every
	// problem; a rule broken only because its key failed to decode is
	// left out, the decode error already names it.
	errs := d.errs
	for _, e := range cfg.validate() {
		if !d.failedAt(e.Path) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return cfg, nil
}

// parseDocument parses data as exactly one YAML document and returns its
// root node (nil for an empty file). Invalid UTF-8 and a second document
// are errors with their position.
func parseDocument(file string, data []byte) (*yaml.Node, *FieldError) {
	if !utf8.Valid(data) {
		off := invalidUTF8(data)
		line := bytes.Count(data[:off], []byte("\n")) + 1
		col := off - bytes.LastIndexByte(data[:off], '\n')
		return nil, &FieldError{File: file, Line: line, Column: col,
			Message: fmt.Sprintf("not valid UTF-8: byte 0x%02x at offset %d; save the file as UTF-8", data[off], off)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(file, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(file, err)
	default:
		return nil, &FieldError{File: file, Line: max(next.Line-1, 1), Column: 1,
			Message: "a second YAML document starts here; a configuration is one document (remove the --- separator or split the file)"}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// invalidUTF8 returns the offset of the first byte that is not UTF-8.
func invalidUTF8(data []byte) int {
	for off := 0; off < len(data); {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			return off
		}
		off += n
	}
	return len(data)
}

// failedAt reports whether decoding failed at path, above it or below it.
func (d *decoder) failedAt(path string) bool {
	for _, e := range d.errs {
		if within(path, e.Path) || within(e.Path, path) {
			return true
		}
	}
	return false
}

// within reports whether path is base or a key path under it.
func within(path, base string) bool {
	if !strings.HasPrefix(path, base) {
		return false
	}
	return len(path) == len(base) || base == "" || path[len(base)] == '.' || path[len(base)] == '['
}

// syntaxError turns a yaml.v3 parse error ("yaml: line 3: ...") into a
// FieldError with its line.
func syntaxError(file string, err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	// yaml.v3 leaves "line N" out when the problem is on the first line.
	fe := &FieldError{File: file, Line: 1, Column: 1, Message: "YAML syntax: " + msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ":"); ok {
			if l, err := strconv.Atoi(n); err == nil {
				fe.Line, fe.Column, fe.Message = l, 1, "YAML syntax:"+after
			}
		}
	}
	return fe
}

func sortErrors(es Errors) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Path < es[j].Path
	})
}

type pos struct{ line, col int }

type decoder struct {
	file  string
	errs  Errors
	lines map[string]pos
	// kind is the kind of the device being decoded, for its groups and
	// tags.
	kind string
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	fe := &FieldError{File: d.file, Path: clip(path), Message: fmt.Sprintf(format, clipArgs(args)...)}
	if n != nil {
		fe.Line, fe.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, fe)
}

var (
	durationType     = reflect.TypeOf(Duration(0))
	brokerHealthType = reflect.TypeOf(BrokerHealth{})
	deviceType       = reflect.TypeOf(Device{})
	groupType        = reflect.TypeOf(PollGroup{})
	tagType          = reflect.TypeOf(Tag{})
)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decode decodes n into v and records n's position for path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolveAlias(n)
	d.lines[path] = pos{n.Line, n.Column}
	d.value(n, v, path)
}

// resolveAlias follows aliases to their anchored node. A recursive alias
// cannot loop in the decoder: each step descends one level of the finite
// Config type, which ends in scalars.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// value decodes n into v without recording a position: a struct field
// records its key's instead.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	n = resolveAlias(n)
	if v.Kind() == reflect.Pointer {
		if n.Tag == "!!null" {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		v = v.Elem()
	}
	switch v.Type() {
	case durationType:
		d.duration(n, v, path)
		return
	case brokerHealthType:
		d.brokerHealth(n, v, path)
		return
	case deviceType:
		d.device(n, v, path)
		return
	case groupType:
		d.kindStruct(n, v, path, groupLevel)
		return
	case tagType:
		d.kindStruct(n, v, path, tagLevel)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		s, ok := d.scalar(n, path, "true or false")
		if !ok {
			return
		}
		b, err := strconv.ParseBool(s)
		if err != nil || n.Tag != "!!bool" {
			d.errorf(n, path, "want true or false, got %q", s)
			return
		}
		v.SetBool(b)
	case reflect.Int:
		s, ok := d.scalar(n, path, "an integer")
		if !ok {
			return
		}
		i, err := strconv.ParseInt(s, 0, 32)
		if err != nil || n.Tag != "!!int" {
			d.errorf(n, path, "want an integer, got %q", s)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		s, ok := d.scalar(n, path, "a number")
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || (n.Tag != "!!float" && n.Tag != "!!int") || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n, path, "want a finite number, got %q", s)
			return
		}
		v.SetFloat(f)
	default:
		d.errorf(n, path, "internal: no decoder for %s", v.Type())
	}
}

func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, path, "want %s, got %s", want, kindName(n))
		return "", false
	}
	return n.Value, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if n.Tag == "!!null" {
		return "nothing (null)"
	}
	return fmt.Sprintf("%q", clip(n.Value))
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, `a duration such as "30s"`)
	if !ok {
		return
	}
	dur, err := parseDuration(s)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return
	}
	v.SetInt(int64(dur))
}

func parseDuration(text string) (time.Duration, error) {
	s := clip(text) // for the messages
	if _, err := strconv.ParseFloat(text, 64); err == nil && text != "0" {
		return 0, fmt.Errorf("invalid duration %q: missing unit (write %ss or %sms)", s, s, s)
	}
	dur, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as 500ms, 30s or 1m30s", s)
	}
	if dur < 0 {
		return 0, fmt.Errorf("invalid duration %q: must be >= 0", s)
	}
	return dur, nil
}

func (d *decoder) brokerHealth(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, `off or a duration such as "2m"`)
	if !ok {
		return
	}
	if s == "off" {
		v.Set(reflect.ValueOf(BrokerHealth{Mode: admission.BrokerHealthOff}))
		return
	}
	dur, err := parseDuration(s)
	if err != nil {
		d.errorf(n, path, "want off or a positive duration: %v", err)
		return
	}
	if dur == 0 {
		d.errorf(n, path, "want off or a positive duration, got %q (write off to disable it)", s)
		return
	}
	v.Set(reflect.ValueOf(BrokerHealth{Mode: admission.BrokerHealthOn, Threshold: dur}))
}

// fieldCache holds fields' result per type: a large file has thousands of
// mappings of a handful of types.
var fieldCache sync.Map // reflect.Type -> map[string][]int

// fields maps yaml keys to struct field indexes, following inline structs.
// The result is shared; callers must not modify it.
// structFields is a struct type's decoding plan, built once per type.
type structFields struct {
	byKey map[string][]int // YAML key -> field index path
	line  []int            // the int field Line, which records the mapping's line; nil if none
}

func fields(t reflect.Type) *structFields {
	if m, ok := fieldCache.Load(t); ok {
		return m.(*structFields)
	}
	sf := &structFields{byKey: buildFields(t)}
	if f, ok := t.FieldByName("Line"); ok && f.Type.Kind() == reflect.Int {
		sf.line = f.Index
	}
	fieldCache.Store(t, sf)
	return sf
}

func buildFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if opts == "inline" {
			for k, idx := range buildFields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = []int{i}
	}
	return out
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	d.structureRest(n, v, path, nil)
}

// structureRest decodes the mapping n into the struct v. With rest
// non-nil, the index of each key v has no field for is appended to it
// instead of being an error; it reports whether n was a mapping.
func (d *decoder) structureRest(n *yaml.Node, v reflect.Value, path string, rest *[]int) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", kindName(n))
		return false
	}
	sf := fields(v.Type())
	if sf.line != nil {
		v.FieldByIndex(sf.line).SetInt(int64(n.Line))
	}
	seen := newKeySet(len(n.Content) / 2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if first := seen.add(n.Content[:i], k); first != nil {
			d.errorf(k, p, "duplicate key (first at line %d)", first.Line)
			continue
		}
		idx, ok := sf.byKey[k.Value]
		switch {
		case !ok && rest != nil:
			*rest = append(*rest, i)
		case !ok:
			d.errorf(k, p, "unknown key %q%s", k.Value, d.suggest(k.Value, sf.byKey))
		default:
			d.lines[p] = pos{k.Line, k.Column}
			d.value(val, v.FieldByIndex(idx), p)
		}
	}
	return true
}

// device decodes a device: the keys every device has into Device, then
// the rest, strictly, into the settings struct of the device's kind. Its
// groups and tags are decoded knowing the kind, which may be written
// after them.
func (d *decoder) device(n *yaml.Node, v reflect.Value, path string) {
	d.kind = scalarValue(n, "kind")
	defer func() { d.kind = "" }()
	var rest []int
	if !d.structureRest(n, v, path, &rest) {
		return
	}
	dev := v.Addr().Interface().(*Device)
	dev.Settings = d.kindRest(n, rest, path, deviceLevel)
}

// kindStruct decodes a poll group or a tag of a device of kind d.kind:
// the keys every one has into v, the rest, strictly, into the kind's
// settings for the level.
func (d *decoder) kindStruct(n *yaml.Node, v reflect.Value, path string, l level) {
	var rest []int
	if !d.structureRest(n, v, path, &rest) {
		return
	}
	if s := d.kindRest(n, rest, path, l); s != nil {
		v.FieldByName("Settings").Set(reflect.ValueOf(s))
	}
}

// kindRest decodes the keys of the mapping n at the indexes rest, which
// the common struct has no field for, into a new settings struct of the
// kind d.kind for the level and returns it: nil when the kind has none.
// A key of another kind, or of none, is an error.
func (d *decoder) kindRest(n *yaml.Node, rest []int, path string, l level) any {
	k := LookupKind(d.kind)
	var settings any
	var sv reflect.Value
	var own map[string][]int
	if k != nil {
		if settings = k.newSettings(l); settings != nil {
			// Every group and tag passes here: its own struct gives the
			// keys, without building a second one (settingsKeys).
			sv = reflect.ValueOf(settings).Elem()
			own = fields(sv.Type()).byKey
		}
	}
	// For did-you-mean, built at the first unknown key: the keys of this
	// kind and of the others.
	var known, others map[string][]int
	for _, i := range rest {
		key, val := n.Content[i], n.Content[i+1]
		p := join(path, key.Value)
		if idx, ok := own[key.Value]; ok {
			d.lines[p] = pos{key.Line, key.Column}
			d.value(val, sv.FieldByIndex(idx), p)
			continue
		}
		if msg := foreignKey(key.Value, d.kind, l); msg != "" {
			// With an unknown kind, the kind is the one error.
			if k != nil {
				d.errorf(key, p, "%s", msg)
			}
			continue
		}
		if known == nil {
			known, others = kindKeys(k, l), otherKindsKeys(k, l)
		}
		hint := d.suggest(key.Value, known)
		if other := d.closest(key.Value, others); hint == "" && other != "" && k != nil {
			hint = fmt.Sprintf(" (did you mean %q? %s)", other, foreignKey(other, d.kind, l))
		}
		d.errorf(key, p, "unknown key %q%s", key.Value, hint)
	}
	return settings
}

// scalarValue is the scalar value of key in the mapping n, or "".
func scalarValue(n *yaml.Node, key string) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			if v := resolveAlias(n.Content[i+1]); v.Kind == yaml.ScalarNode {
				return v.Value
			}
			return ""
		}
	}
	return ""
}

// keySet finds a repeated key of one mapping. A struct's mapping has a
// handful of keys, where scanning the earlier ones beats a map; a large
// (malformed) one gets a map, so the decoder stays linear in the input.
type keySet map[string]*yaml.Node

const keySetScanMax = 16

func newKeySet(n int) keySet {
	if n <= keySetScanMax {
		return nil
	}
	return make(keySet, n)
}

// add returns the earlier key node named like k, or records k; earlier
// holds the key/value pairs before k.
func (s keySet) add(earlier []*yaml.Node, k *yaml.Node) *yaml.Node {
	if s == nil {
		return earlierKey(earlier, k.Value)
	}
	if first, ok := s[k.Value]; ok {
		return first
	}
	s[k.Value] = k
	return nil
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of names, got %s", kindName(n))
		return
	}
	v.Set(reflect.MakeMap(v.Type()))
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, p, "duplicate name (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if k.Value == "" {
			d.errorf(k, p, "empty name")
			continue
		}
		e := reflect.New(v.Type().Elem()).Elem()
		// A named entry is where its name is written.
		d.lines[p] = pos{k.Line, k.Column}
		d.value(val, e, p)
		v.SetMapIndex(reflect.ValueOf(k.Value), e)
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.decode(item, s.Index(i), path+"["+strconv.Itoa(i)+"]")
	}
	v.Set(s)
}

// suggest proposes the known key closest to a misspelt one.
func (d *decoder) suggest(key string, known map[string][]int) string {
	best := d.closest(key, known)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// closest is the known key within a small edit distance of key, or "".
// Past MaxProblems problems it is "" at once: decoding reports mostly in
// file order, so those problems are counted, not listed (half a million
// unknown keys spent most of their time here). The exception is a kind's
// own keys, decoded after the device's groups: a hint may be missing there
// behind 100 earlier problems.
func (d *decoder) closest(key string, known map[string][]int) string {
	if len(d.errs) >= MaxProblems {
		return ""
	}
	const maxDist = 3
	best, bestD := "", maxDist
	for k := range known {
		// The distance is at least the difference in length: a long
		// (or huge) key needs no matrix to be ruled out.
		if abs(len(key)-len(k)) >= maxDist {
			continue
		}
		if dd := editDistance(key, k); dd < bestD || (dd == bestD && best != "" && k < best) {
			best, bestD = k, dd
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// ClipAbove and MaxEcho bound how much of a value from the file an error
// repeats: a malformed file can hold a scalar of megabytes. A string longer
// than ClipAbove is quoted by its first MaxEcho bytes and its length; the
// limit is above the longest explanation a message passes as an argument.
const (
	ClipAbove = 256
	MaxEcho   = 64
)

// clip shortens s for an error message, saying how long it was.
func clip(s string) string {
	if len(s) <= ClipAbove {
		return s
	}
	return clipTo(s, MaxEcho)
}

// clipTo keeps the first n bytes of s, cut at a character boundary, and
// says how long s was.
func clipTo(s string, n int) string {
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:cut], len(s))
}

// clipArgs clips every string argument of an error message, also one of
// a named string type (a DeploymentMode holding whatever the file wrote).
func clipArgs(args []any) []any {
	for i, a := range args {
		if v := reflect.ValueOf(a); v.Kind() == reflect.String && v.Len() > ClipAbove {
			args[i] = clip(v.String())
		}
	}
	return args
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// earlierKey returns the key node among the key/value pairs kv named key.
func earlierKey(kv []*yaml.Node, key string) *yaml.Node {
	for j := 0; j+1 < len(kv); j += 2 {
		if kv[j].Value == key {
			return kv[j]
		}
	}
	return nil
}
