package transports_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

type nop struct{ name string }

func (n nop) Name() string                 { return n.name }
func (nop) ActivationBound() time.Duration { return time.Second }
func (nop) CloseBound() time.Duration      { return time.Second }
func (nop) Open(context.Context) error     { return nil }
func (nop) Close(context.Context) error    { return nil }
func (nop) State() transports.State        { return transports.State{Converged: true} }

func TestRegistry(t *testing.T) {
	transports.Register("test-nop", func(name string, cfg any) (transports.Transport, error) {
		return nop{name: name}, nil
	})
	tr, err := transports.New("test-nop", "a", nil)
	if err != nil || tr.Name() != "a" {
		t.Fatalf("New: %v %v", tr, err)
	}
	_, err = transports.New("nope", "a", nil)
	if !errors.Is(err, transports.ErrUnknownKind) || !strings.Contains(err.Error(), "test-nop") {
		t.Fatalf("unknown kind: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("second Register of a kind did not panic")
		}
	}()
	transports.Register("test-nop", nil)
}

// A device transport's factory refuses a configuration that is not a
// *routes.Device with the package's ErrConfig, and a failed build returns
// a nil Transport, not one holding a nil pointer.
func TestRegisterDevice(t *testing.T) {
	errs := transports.NewDeviceErrors("testdev")
	kind := routes.DeviceKind{Name: "test-dev", Endpoint: func(d *routes.Device) (routes.Endpoint, error) { return routes.Endpoint{}, nil }}
	transports.RegisterDevice(kind, errs, func(name string, dev *routes.Device) (*nop, error) {
		if dev.Address == "" {
			return nil, fmt.Errorf("%w: device %q: address is required", errs.Config, name)
		}
		return &nop{name: name}, nil
	})
	// One registration: the configuration knows the kind too.
	if routes.LookupKind("test-dev") == nil {
		t.Fatal("RegisterDevice did not register the kind with routes")
	}
	if tr, err := transports.New("test-dev", "d", &routes.Device{Address: "h"}); err != nil || tr.Name() != "d" {
		t.Fatalf("New: %v %v", tr, err)
	}
	tr, err := transports.New("test-dev", "d", &routes.Device{})
	if !errors.Is(err, errs.Config) || tr != nil {
		t.Fatalf("failed build: %#v, %v; want a nil Transport and testdev's ErrConfig", tr, err)
	}
	_, err = transports.New("test-dev", "d", routes.Device{})
	if !errors.Is(err, errs.Config) || !strings.Contains(err.Error(), `transport "d": configuration is routes.Device, want *routes.Device`) {
		t.Fatalf("another configuration type: %v", err)
	}
}

func TestGuardSurvivesDerivedContexts(t *testing.T) {
	if err := transports.Guard(context.Background()); err != nil {
		t.Fatalf("no guard: %v", err)
	}
	fenced := false
	ctx := transports.WithGuard(context.Background(), func() error {
		if fenced {
			return errors.New("fence deadline passed")
		}
		return nil
	})
	derived, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if err := transports.Guard(derived); err != nil {
		t.Fatalf("valid owner refused: %v", err)
	}
	fenced = true
	if err := transports.Guard(derived); !errors.Is(err, transports.ErrGuard) || !strings.Contains(err.Error(), "fence deadline passed") {
		t.Fatalf("fenced owner: %v", err)
	}
}

func TestGuardRequestChecksBothContexts(t *testing.T) {
	refuse := func(why string) context.Context {
		return transports.WithGuard(context.Background(), func() error { return errors.New(why) })
	}
	ok := transports.WithGuard(context.Background(), func() error { return nil })
	for _, tc := range []struct {
		name       string
		req, owner context.Context
		want       string // "" for no error
	}{
		{"no guards", context.Background(), nil, ""},
		{"both pass", ok, ok, ""},
		{"request refuses", refuse("request fenced"), ok, "request fenced"},
		{"owner refuses", ok, refuse("owner fenced"), "owner fenced"},
		{"request first", refuse("request fenced"), refuse("owner fenced"), "request fenced"},
		{"no owner yet", refuse("request fenced"), nil, "request fenced"},
	} {
		err := transports.GuardRequest(tc.req, tc.owner)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, transports.ErrGuard) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrGuard with %q", tc.name, err, tc.want)
		}
	}
}

func TestGuardRequestRunsASharedGuardOnce(t *testing.T) {
	var calls int
	owner := transports.WithGuard(context.Background(), func() error { calls++; return nil })
	req, cancel := context.WithCancel(owner)
	defer cancel()
	if err := transports.GuardRequest(req, owner); err != nil || calls != 1 {
		t.Fatalf("request derived from the owner: %v, guard ran %d times, want once", err, calls)
	}
	// A guard of the request's own still leaves the owner's to run.
	var own int
	req2 := transports.WithGuard(req, func() error { own++; return nil })
	if err := transports.GuardRequest(req2, owner); err != nil || own != 1 || calls != 2 {
		t.Fatalf("two guards: %v, ran %d and %d times, want once each", err, own, calls-1)
	}
}

func TestMoved(t *testing.T) {
	for _, tc := range []struct {
		old, v any
		band   float64
		want   bool
	}{
		{20.0, 25.0, 5, false}, // a change equal to the deadband is not published
		{20.0, 25.5, 5, true},
		{20.0, 15.0, 5, false},
		{20.0, 14.9, 5, true},
		{int32(1), int32(1), 0, false},
		{int32(1), int32(2), 0, true},
		{uint16(7), 7.0, 0, false},
		{math.NaN(), 1.0, 0, true},
		{"a", "a", 3, false},
		{"a", "b", 3, true},
		{true, false, 0, true},
	} {
		if got := transports.Moved(tc.old, tc.v, tc.band); got != tc.want {
			t.Errorf("Moved(%v, %v, %v) = %v, want %v", tc.old, tc.v, tc.band, got, tc.want)
		}
	}
}
