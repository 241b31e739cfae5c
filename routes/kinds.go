package routes

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// DeviceKind is the configuration half of a device transport: how a
// device of one kind is decoded beyond the keys every device has, which
// defaults it takes, how it is checked and how its keys are documented.
// Its bounds are not here: admission sums what the transport built from
// the device reports (preflight.Build). A transport package registers
// its kind from init with RegisterKind, next to
// transports.RegisterDevice; docs/adding-a-transport.md lists the rest.
type DeviceKind struct {
	// Name is the kind as written in a device's kind key.
	Name string
	// Settings returns a new pointer to the kind's own configuration
	// struct; a device's keys that are not common to every device are
	// decoded into it strictly, with positions, and it becomes
	// Device.Settings. Nil for a kind without keys of its own.
	Settings func() any
	// GroupSettings returns a new pointer to the kind's own poll group
	// configuration struct, decoded as TagSettings is, into
	// PollGroup.Settings. Nil for a kind without group keys of its own.
	GroupSettings func() any
	// TagSettings returns a new pointer to the kind's own tag
	// configuration struct; a tag's keys that are not common to every tag
	// are decoded into it strictly, with positions, and it becomes
	// Tag.Settings. Nil for a kind without tag keys of its own.
	TagSettings func() any
	// Subscribe allows poll groups of mode subscribe.
	Subscribe bool
	// Defaults fills the kind's defaults of device name, whose device,
	// groups and tags routes has given their settings structs; may be
	// nil.
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
)

// RegisterKind makes a device kind known to the configuration. A transport
// package does not call it itself: transports.RegisterDevice does, with the
// kind's transport, so that every kind the configuration knows can be
// built. Registering a kind twice, or one without a name or endpoint,
// panics: it is a programming error.
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

// SettingsOf returns the Settings of a Device, a PollGroup or a Tag as
// the kind's *T: a new zero T when one built in code carries none, an
// error when they are another kind's.
func SettingsOf[T any](settings any) (*T, error) {
	switch s := settings.(type) {
	case nil:
		return new(T), nil
	case *T:
		return s, nil
	}
	return nil, fmt.Errorf("settings are %T, want %T", settings, (*T)(nil))
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

// level is where a kind's own keys are written: on a device, on one of
// its poll groups or on one of their tags.
type level int

const (
	deviceLevel level = iota
	groupLevel
	tagLevel
)

// noun names the level's keys in messages.
func (l level) noun() string { return [...]string{"key", "group key", "tag key"}[l] }

// common is the struct holding the keys every kind has at the level.
func (l level) common() reflect.Type {
	return [...]reflect.Type{deviceType, groupType, tagType}[l]
}

// newSettings returns a new settings struct of the kind for the level;
// nil when the kind has none there.
func (k *DeviceKind) newSettings(l level) any {
	mk := [...]func() any{k.Settings, k.GroupSettings, k.TagSettings}[l]
	if mk == nil {
		return nil
	}
	return mk()
}

// settingsKeys are the YAML keys of the kind's own configuration struct
// for the level.
func (k *DeviceKind) settingsKeys(l level) map[string][]int {
	s := k.newSettings(l)
	if s == nil {
		return nil
	}
	return fields(reflect.TypeOf(s).Elem()).byKey
}

// accepts reports whether a device of this kind may carry the
// kind-specific key at the level.
func (k *DeviceKind) accepts(key string, l level) bool {
	_, ok := k.settingsKeys(l)[key]
	return ok
}

// ownersOf lists the registered kinds other than except that accept key.
func ownersOf(key, except string, l level) []string {
	var out []string
	for _, name := range Kinds() {
		if k := LookupKind(name); name != except && k.accepts(key, l) {
			out = append(out, name)
		}
	}
	return out
}

// foreignKey is the message for a key that belongs to other kinds, or ""
// when no registered kind accepts it.
func foreignKey(key, kind string, l level) string {
	owners := ownersOf(key, kind, l)
	if len(owners) == 0 {
		return ""
	}
	article := "a"
	if strings.ContainsRune("aeiou", rune(owners[0][0])) {
		article = "an"
	}
	return fmt.Sprintf("%s is %s %s %s, not %s", key, article, strings.Join(owners, "/"), l.noun(), kind)
}

// otherKindsKeys are the keys at the level of the registered kinds other
// than k.
func otherKindsKeys(k *DeviceKind, l level) map[string][]int {
	out := map[string][]int{}
	for _, name := range Kinds() {
		o := LookupKind(name)
		if k != nil && name == k.Name {
			continue
		}
		for key := range o.settingsKeys(l) {
			out[key] = nil
		}
	}
	return out
}

// kindKeys are the keys kind k allows at the level, for did-you-mean: the
// common keys there and the kind's own settings.
func kindKeys(k *DeviceKind, l level) map[string][]int {
	out := map[string][]int{}
	for key, idx := range fields(l.common()).byKey {
		out[key] = idx
	}
	if k != nil {
		for key, idx := range k.settingsKeys(l) {
			out[key] = idx
		}
	}
	return out
}
