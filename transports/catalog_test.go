package transports_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

var testErrs = transports.NewDeviceErrors("dev")

func catalog(groups ...*routes.PollGroup) (*transports.Catalog[string, string], error) {
	return transports.NewCatalog("d1", &routes.Device{Groups: groups}, []string{"poll"}, testErrs,
		func(tg *routes.Tag) (string, error) { return tg.Address, nil },
		func(pg *routes.PollGroup, tags []string) string { return pg.Name + ":" + strings.Join(tags, ",") })
}

func TestCatalogRefusals(t *testing.T) {
	tag := func(name string, w bool) *routes.Tag {
		return &routes.Tag{Name: name, Address: "@" + name, Writable: w}
	}
	for _, tc := range []struct {
		groups []*routes.PollGroup
		want   string
	}{
		{[]*routes.PollGroup{{Name: "g"}, {Name: "g"}}, `poll group "g" defined twice`},
		{[]*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{tag("x", false)}}, {Name: "h", Tags: []*routes.Tag{tag("x", false)}}}, `tag "x" defined twice`},
		{[]*routes.PollGroup{{Name: "g", Mode: "subscribe"}}, `mode "subscribe": want poll`},
		{[]*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Address: "@1"}}}}, `device "d1": group "g": dev: invalid configuration: a tag at address "@1" has no name`},
		{[]*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{{Name: "x", Address: "@x", Scale: new(float64)}}}}, `tag "x": scale 0 would make every value the offset`},
	} {
		if _, err := catalog(tc.groups...); !errors.Is(err, testErrs.Config) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
	c, err := catalog(&routes.PollGroup{Name: "g", Tags: []*routes.Tag{tag("x", true), tag("y", false)}})
	if err != nil {
		t.Fatal(err)
	}
	g, vals, err := c.Group("g")
	if err != nil || g != "g:@x,@y" || len(vals) != 2 || vals[1].Tag != "y" || vals[1].Quality != transports.Bad {
		t.Fatalf("Group: %q %+v %v", g, vals, err)
	}
	if _, _, err := c.Group("nope"); !errors.Is(err, testErrs.UnknownGroup) {
		t.Errorf("unknown group: %v", err)
	}
	if x, err := c.Writable("x"); err != nil || x != "@x" {
		t.Errorf("writable tag: %q %v", x, err)
	}
	if _, err := c.Writable("y"); !errors.Is(err, transports.ErrReadOnly) {
		t.Errorf("read-only tag: %v", err)
	}
	if _, err := c.Writable("z"); !errors.Is(err, transports.ErrUnknownTag) || !errors.Is(err, testErrs.UnknownTag) {
		t.Errorf("unknown tag: %v", err)
	}
	vals[0] = transports.Value{Tag: "x", Quality: transports.Good, Value: 1}
	down := errors.New("device gone")
	vals, err = transports.FailUnread(vals, down)
	if err != down || vals[0].Err != nil || vals[1].Err != down || vals[1].Timestamp.IsZero() {
		t.Errorf("FailUnread: %+v %v", vals, err)
	}
}

// A transport is built only from a device of its own kind.
func TestCheckKind(t *testing.T) {
	if err := transports.CheckKind("d1", &routes.Device{Kind: "k"}, "k", testErrs); err != nil {
		t.Errorf("own kind: %v", err)
	}
	for dev, want := range map[*routes.Device]string{
		nil:                      `dev: invalid configuration: transport "d1": no device`,
		{Kind: "other"}:          `dev: invalid configuration: device "d1": kind "other", want k`,
		{Kind: "", Address: "h"}: `dev: invalid configuration: device "d1": kind "", want k`,
	} {
		if err := transports.CheckKind("d1", dev, "k", testErrs); !errors.Is(err, testErrs.Config) || err.Error() != want {
			t.Errorf("%+v: %v, want %q", dev, err, want)
		}
	}
}
