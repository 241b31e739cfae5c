package dataplane

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasebridge/leasebridge/internal/embedbroker"
	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// runBridgeTerm runs one term's bridge between two embedded brokers,
// counted by c, forwards n messages in and then ends the term.
func runBridgeTerm(t *testing.T, c *BridgeCounters, remote, local *embedbroker.Broker, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := func(url string) *mqtt.Client {
		cl, err := mqtt.New("mqtt:"+url, mqtt.Config{Broker: routes.Broker{URL: url}, Session: "s", Node: "n"})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	r, l := client(remote.URL), client(local.URL)
	b, err := mqtt.NewBridge("r", r, l, []*routes.TopicMap{{From: "site/#", To: "v/", Direction: mqtt.In, QoS: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range []*mqtt.Client{r, l} {
		if err := cl.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cl.Close(context.Background()) }()
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); defer c.Track("s", b)(); _ = b.Run(rctx) }()
	for range n {
		if err := remote.Server.Publish("site/x", []byte("1"), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	for in, _ := b.Forwarded(); in < int64(n); in, _ = b.Forwarded() {
		if ctx.Err() != nil {
			t.Fatalf("forwarded %d of %d", in, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
}

// The forwarded counter adds what ended terms forwarded to what the
// running one forwards, so it never goes down across takeovers.
func TestBridgeCountersAcrossTerms(t *testing.T) {
	remote, err := embedbroker.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remote.Close() })
	local, err := embedbroker.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	c := NewBridgeCounters()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	c.Declare("s", "r")
	check := func(in int) {
		t.Helper()
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, line := range []string{
			`leasebridge_bridge_forwarded_total{direction="in",route="r",session="s"} ` + strconv.Itoa(in),
			`leasebridge_bridge_forwarded_total{direction="out",route="r",session="s"} 0`,
			`leasebridge_bridge_dropped_total{route="r",session="s"} 0`,
		} {
			if !strings.Contains(rec.Body.String(), line+"\n") {
				t.Errorf("no %q in:\n%s", line, rec.Body)
			}
		}
	}
	check(0)
	runBridgeTerm(t, c, remote, local, 3)
	runBridgeTerm(t, c, remote, local, 4)
	check(7)
}
