package dataplane_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasebridge/leasebridge/dataplane"
	"github.com/leasebridge/leasebridge/internal/testbin"
	"github.com/leasebridge/leasebridge/transports/mqtt"
	"github.com/leasebridge/leasebridge/transports/s7/s7test"
)

// valueCounts reads leasebridge_values_polled_total and
// leasebridge_values_published_total of route.
func valueCounts(t *testing.T, reg *prometheus.Registry, session, route string) (polled, published float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["session"] != session || labels["route"] != route {
				continue
			}
			switch mf.GetName() {
			case "leasebridge_values_polled_total":
				polled, found = m.GetCounter().GetValue(), found+1
			case "leasebridge_values_published_total":
				published, found = m.GetCounter().GetValue(), found+1
			}
		}
	}
	if found != 2 {
		t.Fatalf("values counters of %s/%s: %d of 2 series found", session, route, found)
	}
	return polled, published
}

// The values counters count what the device returned and what the broker
// got: with on_change, three static tags are polled three at a time while
// only their first values and a change reach the broker, and the
// published count matches the broker's deliveries exactly.
func TestValuesPolledAndPublishedCounted(t *testing.T) {
	plc, err := s7test.Start(0, 1, 240)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plc.Close)
	db := make([]byte, 8)
	binary.BigEndian.PutUint32(db[2:], math.Float32bits(21.5))
	plc.SetDB(1, db)
	h, _ := startRoutes(t, s7Routes, plc.Addr())
	h.value(t, "v/oven/temp", func(v mqtt.ValueMessage) bool { return v.Quality == "good" })

	// settled waits until the broker delivered every value the counter
	// says was published, and the poll count moved past atLeast.
	settled := func(atLeast float64) (polled, published float64) {
		testbin.Observe(t, 10*time.Second, func() (bool, string) {
			polled, published = valueCounts(t, h.reg, "oven", "oven-poll")
			h.mu.Lock()
			delivered := h.delivered
			h.mu.Unlock()
			return polled >= atLeast && float64(delivered) == published,
				fmt.Sprintf("polled %g (want >= %g), published %g, delivered %d", polled, atLeast, published, delivered)
		})
		return polled, published
	}
	polled, published := settled(3)
	if published != 3 {
		t.Errorf("published %g values of three unchanged tags, want 3", published)
	}
	// Many more polls of unchanged values publish nothing more.
	polled2, published2 := settled(polled + 30)
	if published2 != published {
		t.Errorf("unchanged tags: published went from %g to %g", published, published2)
	}
	if math.Mod(polled2, 3) != 0 {
		t.Errorf("polled %g values of a three-tag group: not a multiple of 3", polled2)
	}
	if r := h.write(t, "a", "temp", 99.5); r.Code != dataplane.WriteOK {
		t.Fatalf("write temp: %+v", r)
	}
	h.value(t, "v/oven/temp", func(v mqtt.ValueMessage) bool { return v.Value == 99.5 })
	if _, published3 := settled(polled2 + 3); published3 != published2+1 {
		t.Errorf("one changed tag: published went from %g to %g, want one more", published2, published3)
	}
}
