package routes

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// DeviceKind is the configuration half of a device transport: how a
// device of one kind is decoded beyond the keys every device has, which
// defaults it takes, how it is checked and how its keys are documented.
// Its bounds are not here: admission sums what the transport built from
// the device reports (failover.Preflight). A transport package registers its kind from init with
// RegisterKind, next to transports.Register; docs/adding-a-transport.md
// lists the rest.
type DeviceKind struct {
	// Name is the kind as written in a device's kind key.
	Name string
	// Settings returns a new pointer to the kind's own configuration
	// struct; a device's keys that are not common to every device are
	// decoded into it strictly, with positions, and it becomes
	// Device.Settings. Nil for a kind without keys of its own.
	Settings func() any
	// Keys are the Device fields, beyond the common ones, that a kind
	// whose keys still live in Device accepts (modbus).
	Keys []string
	// TagKeys are the Tag keys, beyond the common ones, the kind accepts.
	TagKeys []string
	// Subscribe allows poll groups of mode subscribe.
	Subscribe bool
	// Defaults fills the kind's defaults of device name; may be nil.
	Defaults func(c *Config, name string, d *Device)
	// Check reports the kind's problems of d, written at path
	// (devices.<name>), with c.ErrorAt; may be nil.
	Check func(c *Config, path string, d *Device) Errors
	// CheckTag reports the kind's problems of a tag; may be nil.
	CheckTag func(c *Config, path string, d *Device, t *Tag) Errors
	// WholeTag says CheckTag parses the whole tag (its type, length and
	// scale too), as the transport will: it then runs only on a tag that
	// passed the common rules, so one problem gives one error.
	WholeTag bool
	// Endpoint is the device's exclusive endpoint (see Device.Endpoint).
	Endpoint func(d *Device) (Endpoint, error)
	// Doc is the kind's paragraph for docs/configuration.md.
	Doc string
}

var (
	kindsMu  sync.RWMutex
	kindsReg = map[string]*DeviceKind{}
	// specific are the Device keys (false) and Tag keys (true) some
	// registered kind claims, kept with the registry.
	specific = map[bool][]string{}
)

// RegisterKind makes a device kind known to the configuration; transport
// packages call it from init. Registering a kind twice, or one without a
// name or endpoint, panics: it is a programming error.
func RegisterKind(k DeviceKind) {
	if k.Name == "" || k.Endpoint == nil {
		panic(fmt.Sprintf("routes: device kind %q registered without a name or endpoint", k.Name))
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kindsReg[k.Name]; dup {
		panic(fmt.Sprintf("routes: device kind %q registered twice", k.Name))
	}
	kindsReg[k.Name] = &k
	for _, tag := range []bool{false, true} {
		list := k.Keys
		if tag {
			list = k.TagKeys
		}
		specific[tag] = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(specific[tag]), list...))))
	}
}

// LookupKind returns the registered kind named name, or nil.
func LookupKind(name string) *DeviceKind {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return kindsReg[name]
}

// Kinds lists the registered device kinds in order.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return sortedKeys(kindsReg)
}

// SettingsOf returns the device's Settings as the kind's *T: a new zero T
// when a Device built in code carries none, an error when they are
// another kind's.
func SettingsOf[T any](d *Device) (*T, error) {
	switch s := d.Settings.(type) {
	case nil:
		return new(T), nil
	case *T:
		return s, nil
	}
	return nil, fmt.Errorf("settings are %T, want %T", d.Settings, (*T)(nil))
}

// subscribeKinds lists the registered kinds whose groups may subscribe.
func subscribeKinds() []string {
	var out []string
	for _, name := range Kinds() {
		if LookupKind(name).Subscribe {
			out = append(out, name)
		}
	}
	return out
}

// settingsKeys are the YAML keys of the kind's own configuration struct.
func (k *DeviceKind) settingsKeys() map[string][]int {
	if k.Settings == nil {
		return nil
	}
	return fields(reflect.TypeOf(k.Settings()).Elem()).byKey
}

// accepts reports whether a device of this kind may carry the
// kind-specific key (tag says whether it is a tag key).
func (k *DeviceKind) accepts(key string, tag bool) bool {
	if tag {
		return slices.Contains(k.TagKeys, key)
	}
	if slices.Contains(k.Keys, key) {
		return true
	}
	_, ok := k.settingsKeys()[key]
	return ok
}

// ownersOf lists the registered kinds other than except that accept key.
func ownersOf(key, except string, tag bool) []string {
	var out []string
	for _, name := range Kinds() {
		if k := LookupKind(name); name != except && k.accepts(key, tag) {
			out = append(out, name)
		}
	}
	return out
}

// foreignKey is the message for a key that belongs to other kinds, or ""
// when no registered kind accepts it.
func foreignKey(key, kind string, tag bool) string {
	owners := ownersOf(key, kind, tag)
	if len(owners) == 0 {
		return ""
	}
	what := "key"
	if tag {
		what = "tag key"
	}
	article := "a"
	if strings.ContainsRune("aeiou", rune(owners[0][0])) {
		article = "an"
	}
	return fmt.Sprintf("%s is %s %s %s, not %s", key, article, strings.Join(owners, "/"), what, kind)
}

// otherKindsKeys are the device keys of the registered kinds other than k.
func otherKindsKeys(k *DeviceKind) map[string][]int {
	out := map[string][]int{}
	for _, name := range Kinds() {
		o := LookupKind(name)
		if k != nil && name == k.Name {
			continue
		}
		for _, key := range o.Keys {
			out[key] = nil
		}
		for key := range o.settingsKeys() {
			out[key] = nil
		}
	}
	return out
}

// kindSpecific are the Device or Tag keys some registered kind claims;
// every other key of Device and Tag is common to all kinds.
func kindSpecific(tag bool) []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return specific[tag]
}

// checkForeignKeys refuses a written key of the device, or of its tag at
// path when tag is set, that belongs to another kind: an s7 device
// carrying unit_id is a mistake, not a no-op.
func (c *Config) checkForeignKeys(path string, kind *DeviceKind, tag bool) Errors {
	var errs Errors
	for _, key := range kindSpecific(tag) {
		if p := path + "." + key; c.written(p) && !kind.accepts(key, tag) {
			errs = append(errs, c.errAt(p, "%s", foreignKey(key, kind.Name, tag)))
		}
	}
	return errs
}

// kindKeys are the keys a device of kind k may carry, for did-you-mean:
// the common Device keys, the kind's Device keys and its own settings.
func kindKeys(k *DeviceKind) map[string][]int {
	out := map[string][]int{}
	specific := kindSpecific(false)
	for key, idx := range fields(reflect.TypeOf(Device{})).byKey {
		if !slices.Contains(specific, key) || (k != nil && k.accepts(key, false)) {
			out[key] = idx
		}
	}
	if k != nil {
		for key, idx := range k.settingsKeys() {
			out[key] = idx
		}
	}
	return out
}
