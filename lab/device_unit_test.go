package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/faultproxy"
)

// The device witness is what the lab fails on; these feed it request logs
// by hand so a witness that could never fire is caught.

// reqLog builds a device log from a sequence of connection ids, one
// request each, 10 ms apart.
func reqLog(base time.Time, conns ...int) []attributed {
	out := make([]attributed, len(conns))
	for i, c := range conns {
		out[i] = attributed{devRequest: devRequest{Seq: i + 1, At: base.Add(time.Duration(i) * 10 * time.Millisecond)}, Conn: c}
	}
	return out
}

func TestWitnessAcceptsAHandover(t *testing.T) {
	base := time.Now()
	cs := summarise(reqLog(base, 1, 1, 1, 2, 2, 3), base.Add(15*time.Millisecond))
	next, gap, err := handover(cs, 1)
	if err != nil || next.Conn != 2 || gap != 10*time.Millisecond {
		t.Fatalf("handover(1) = conn %d, gap %s, %v; want conn 2, 10ms, nil", next.Conn, gap, err)
	}
	if old, _ := find(cs, 1); old.N != 3 || old.After != 1 {
		t.Fatalf("old connection %+v: want 3 requests, 1 after the instant", old)
	}
	if o := overlaps(cs); len(o) != 0 {
		t.Fatalf("sequential connections reported as overlapping: %v", o)
	}
}

func TestWitnessCatchesTwoClients(t *testing.T) {
	base := time.Now()
	// Connection 1 sends once more after connection 2's first request.
	cs := summarise(reqLog(base, 1, 1, 2, 1, 2), time.Time{})
	next, _, err := handover(cs, 1)
	if err == nil || next.Conn != 2 || !strings.Contains(err.Error(), "two clients") {
		t.Fatalf("handover(1) = conn %d, %v; want two clients with connection 2", next.Conn, err)
	}
	if o := overlaps(cs); len(o) != 1 {
		t.Fatalf("overlaps = %v, want one pair", o)
	}
	// The next takeover is judged on its own: connection 1's interleaving
	// was the previous one's.
	cs = summarise(reqLog(base, 1, 2, 1, 2, 3), time.Time{})
	if _, _, err := handover(cs, 2); err != nil {
		t.Fatalf("handover(2) after an earlier overlap: %v", err)
	}
	if _, _, err := handover(summarise(reqLog(base, 1, 1), time.Time{}), 1); err == nil {
		t.Fatal("a handover with no successor's request passed")
	}
}

// A client port reused by a later connection is attributed to the
// connection open at the time of each request.
func TestAttributionFollowsPortReuse(t *testing.T) {
	base := time.Now()
	conns := []faultproxy.ConnStats{
		{ID: 1, UpstreamAddr: "127.0.0.1:5000", Opened: base},
		{ID: 2, UpstreamAddr: "127.0.0.1:5001", Opened: base.Add(time.Second)},
		{ID: 3, UpstreamAddr: "127.0.0.1:5000", Opened: base.Add(2 * time.Second)},
	}
	reqs := []devRequest{
		{Seq: 1, At: base.Add(time.Millisecond), Client: "127.0.0.1:5000"},
		{Seq: 2, At: base.Add(time.Second + time.Millisecond), Client: "127.0.0.1:5001"},
		{Seq: 3, At: base.Add(2*time.Second + time.Millisecond), Client: "127.0.0.1:5000"},
		{Seq: 4, At: base.Add(3 * time.Second), Client: "127.0.0.1:9999"},
	}
	got := attribute(reqs, conns)
	for i, want := range []int{1, 2, 3, 0} {
		if got[i].Conn != want {
			t.Fatalf("request %d attributed to connection %d, want %d", i+1, got[i].Conn, want)
		}
	}
}
