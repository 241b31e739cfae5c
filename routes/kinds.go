package routes

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// DeviceKind is the configuration half of a device transport: how a
// device of one kind is decoded beyond the keys every device has, which
// defaults it takes, how it is checked, what it bounds and how its keys
// are documented. A transport package registers its kind from init with
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
	// whose keys still live in Device accepts (opcua).
	Keys []string
	// TagSettings returns a new pointer to the kind's own tag
	// configuration struct; a tag's keys that are not common to every tag
	// are decoded into it strictly, with positions, and it becomes
	// Tag.Settings. Nil for a kind without tag keys of its own.
	TagSettings func() any
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
	// ActivationBound and CloseBound override the common bounds
	// (connect_timeout + request_timeout, close_timeout); may be nil.
	ActivationBound func(d *Device) time.Duration
	// CloseBound is the longest the kind's close may take; may be nil.
	CloseBound func(d *Device) time.Duration
	// Doc is the kind's paragraph for docs/configuration.md.
	Doc string
}

var (
	kindsMu  sync.RWMutex
	kindsReg = map[string]*DeviceKind{}
	// specific are the Device keys some registered kind claims through
	// Keys, kept with the registry.
	specific []string
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
	specific = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(specific), k.Keys...))))
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

// newSettings returns a new settings struct of the kind for a device, or
// for a tag when tag is set; nil when the kind has none.
func (k *DeviceKind) newSettings(tag bool) any {
	mk := k.Settings
	if tag {
		mk = k.TagSettings
	}
	if mk == nil {
		return nil
	}
	return mk()
}

// settingsKeys are the YAML keys of the kind's own configuration struct
// for a device, or for a tag when tag is set.
func (k *DeviceKind) settingsKeys(tag bool) map[string][]int {
	s := k.newSettings(tag)
	if s == nil {
		return nil
	}
	return fields(reflect.TypeOf(s).Elem()).byKey
}

// accepts reports whether a device of this kind may carry the
// kind-specific key (tag says whether it is a tag key).
func (k *DeviceKind) accepts(key string, tag bool) bool {
	if !tag && slices.Contains(k.Keys, key) {
		return true
	}
	_, ok := k.settingsKeys(tag)[key]
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

// otherKindsKeys are the device keys, or tag keys when tag is set, of the
// registered kinds other than k.
func otherKindsKeys(k *DeviceKind, tag bool) map[string][]int {
	out := map[string][]int{}
	for _, name := range Kinds() {
		o := LookupKind(name)
		if k != nil && name == k.Name {
			continue
		}
		if !tag {
			for _, key := range o.Keys {
				out[key] = nil
			}
		}
		for key := range o.settingsKeys(tag) {
			out[key] = nil
		}
	}
	return out
}

// kindSpecific are the Device keys some registered kind claims through
// Keys; every other key of Device is common to all kinds.
func kindSpecific() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return specific
}

// checkForeignKeys refuses a written key of the device at path that
// belongs to another kind: an opcua device carrying rack is a mistake,
// not a no-op.
func (c *Config) checkForeignKeys(path string, kind *DeviceKind) Errors {
	var errs Errors
	for _, key := range kindSpecific() {
		if p := path + "." + key; c.written(p) && !kind.accepts(key, false) {
			errs = append(errs, c.errAt(p, "%s", foreignKey(key, kind.Name, false)))
		}
	}
	return errs
}

// kindKeys are the keys a device of kind k may carry, for did-you-mean:
// the common Device keys, the kind's Device keys and its own settings;
// with tag set, the common Tag keys and the kind's tag settings.
func kindKeys(k *DeviceKind, tag bool) map[string][]int {
	out := map[string][]int{}
	common := reflect.TypeOf(Device{})
	if tag {
		common = reflect.TypeOf(Tag{})
	}
	specific := kindSpecific()
	for key, idx := range fields(common).byKey {
		if tag || !slices.Contains(specific, key) || (k != nil && k.accepts(key, false)) {
			out[key] = idx
		}
	}
	if k != nil {
		for key, idx := range k.settingsKeys(tag) {
			out[key] = idx
		}
	}
	return out
}
