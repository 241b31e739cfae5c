// Package preflight builds every session's transports as an ownership term
// will, opening none of them, and hands admission the bounds the built
// transports report of themselves: the budget admission prints is the one
// the transports keep. Admit and run both start here.
package preflight

import (
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// Build builds every session's transports as an ownership term will,
// opening none of them, so that a device, broker or route setting only a
// transport checks is refused with its file and line before anything runs
// (by admit and by run), not at the first activation, where a term would
// retry it while holding the lease. With needFiles false, a file a
// transport reads as it is built (a CA, certificate, key or password file)
// or a password_env variable may be missing: admit runs in CI, away from
// the deployment's files and environment, and run checks them.
//
// Each device is built once. The result, never nil (also with errors),
// carries the activation and close bounds every built transport reports
// of itself, and its Admit sums those.
func Build(cfg *routes.Config, needFiles bool) (*Built, routes.Errors) {
	p := &problems{cfg: cfg, needFiles: needFiles, seen: map[string]bool{}}
	built := &Built{cfg: cfg, bounds: routes.Bounds{}, devices: map[string]transports.Transport{}}
	// Every device on its own first, so that each bad one is reported and
	// not only a session's first; the sessions reuse what was built.
	devices := map[string]builtDevice{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Devices)) {
		tr, err := dataplane.NewDevice(name, cfg.Devices[name])
		devices[name] = builtDevice{tr, err}
		p.fail("devices."+name, err)
		if err == nil {
			built.bounds["devices."+name] = boundsOf(tr)
			built.devices[name] = tr
		}
	}
	reuse := func(name string, _ *routes.Device) (transports.Transport, error) {
		return devices[name].t, devices[name].err
	}
	byName := map[string][]*routes.Route{}
	for _, r := range cfg.Routes {
		byName[r.Session] = append(byName[r.Session], r)
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		t, err := dataplane.Build(dataplane.Spec{Config: cfg, Session: name, Routes: byName[name], Device: reuse, AllowMissing: !needFiles})
		if err != nil {
			p.sessionError(err)
			continue
		}
		// A broker's client is the session's own (its client id), its
		// bounds those of the broker entry, whichever session built it.
		for bn, c := range t.Brokers {
			built.bounds["brokers."+bn] = boundsOf(c)
		}
	}
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
	return built, p.errs
}

// boundsOf is what a built transport reports of its bounds, under its
// own name.
func boundsOf(tr transports.Transport) admission.Activation {
	a := admission.Activation{Name: tr.Name(), Bound: tr.ActivationBound(), Close: tr.CloseBound()}
	if e, ok := tr.(transports.Explained); ok {
		a.Parts = e.ActivationParts()
	}
	return a
}

// Built is a configuration whose transports Build built, none opened.
type Built struct {
	cfg    *routes.Config
	bounds routes.Bounds

	mu sync.Mutex
	// devices are the device transports built and not yet handed to a
	// term (Take).
	devices map[string]transports.Transport
}

// Config is the configuration b was built from.
func (b *Built) Config() *routes.Config { return b.cfg }

// Take hands out the transport Build built for device name, once: the
// first term of its session opens it instead of building the device
// again. Nil when there is none left, or b is nil.
func (b *Built) Take(name string) transports.Transport {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tr := b.devices[name]
	delete(b.devices, name)
	return tr
}

// Sessions reduces the configuration's routes to sessions
// (routes.Config.Sessions) whose transports carry the bounds the built
// transports report.
func (b *Built) Sessions() []routes.Session { return b.cfg.Sessions(b.bounds) }

// Admit evaluates every session with those bounds. It opens nothing.
func (b *Built) Admit() []admission.Report { return routes.AdmitSessions(b.Sessions()) }

// Admit is Build then Built.Admit, for a caller that needs only the
// reports and the configuration's problems.
func Admit(cfg *routes.Config, needFiles bool) ([]admission.Report, routes.Errors) {
	b, errs := Build(cfg, needFiles)
	return b.Admit(), errs
}

// builtDevice is a device's transport as Build built it, or the error.
type builtDevice struct {
	t   transports.Transport
	err error
}

// problems collects Build's problems, each entry's once.
type problems struct {
	cfg       *routes.Config
	needFiles bool
	seen      map[string]bool
	errs      routes.Errors
}

// fail records err at the entry path, unless it is a missing file admit
// may ignore or the entry already failed.
func (p *problems) fail(path string, err error) {
	if err == nil || (!p.needFiles && routes.DeploymentInput(err)) || p.seen[path] {
		return
	}
	p.seen[path] = true
	p.errs = append(p.errs, p.cfg.ErrorAt(path, err.Error()))
}

// sessionError records a session whose term could not be built.
func (p *problems) sessionError(err error) {
	var ee *dataplane.EntryError
	if !errors.As(err, &ee) {
		if p.needFiles || !routes.DeploymentInput(err) {
			p.errs = append(p.errs, &routes.FieldError{File: p.cfg.File, Message: err.Error()})
		}
		return
	}
	// A broker or route several sessions share fails once.
	p.fail(ee.Path, ee.Err)
}
