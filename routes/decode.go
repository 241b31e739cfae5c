package routes

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

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

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
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
	// About one key path per 20 bytes of YAML: sized once, the map does
	// not rehash while a large file is decoded.
	d := &decoder{file: file, lines: make(map[string]pos, len(data)/20)}
	cfg := &Config{File: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		d.errs = append(d.errs, syntaxError(file, err))
		return nil, d.errs
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		d.errorf(nil, "", "the configuration is empty")
		return nil, d.errs
	}
	d.decode(doc.Content[0], reflect.ValueOf(cfg).Elem(), "")
	if len(d.errs) > 0 {
		sortErrors(d.errs)
		return nil, d.errs
	}
	cfg.applyDefaults()
	cfg.positions = d.lines
	if errs := cfg.validate(); len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return cfg, nil
}

// syntaxError turns a yaml.v3 parse error ("yaml: line 3: ...") into a
// FieldError with its line.
func syntaxError(file string, err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	fe := &FieldError{File: file, Message: "YAML syntax: " + msg}
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
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	fe := &FieldError{File: d.file, Path: path, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		fe.Line, fe.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, fe)
}

var (
	durationType     = reflect.TypeOf(Duration(0))
	brokerHealthType = reflect.TypeOf(BrokerHealth{})
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
	return fmt.Sprintf("%q", n.Value)
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

func parseDuration(s string) (time.Duration, error) {
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return 0, fmt.Errorf("invalid duration %q: missing unit (write %ss or %sms)", s, s, s)
	}
	dur, err := time.ParseDuration(s)
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
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	sf := fields(v.Type())
	if sf.line != nil {
		v.FieldByIndex(sf.line).SetInt(int64(n.Line))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		// A struct has a handful of keys: scanning the earlier ones is
		// cheaper than a map per mapping.
		if first := earlierKey(n.Content[:i], k.Value); first != nil {
			d.errorf(k, p, "duplicate key (first at line %d)", first.Line)
			continue
		}
		idx, ok := sf.byKey[k.Value]
		if !ok {
			d.errorf(k, p, "unknown key %q%s", k.Value, suggest(k.Value, sf.byKey))
			continue
		}
		d.lines[p] = pos{k.Line, k.Column}
		d.value(val, v.FieldByIndex(idx), p)
	}
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
func suggest(key string, known map[string][]int) string {
	best, bestD := "", 3
	for k := range known {
		if dd := editDistance(key, k); dd < bestD || (dd == bestD && best != "" && k < best) {
			best, bestD = k, dd
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
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
