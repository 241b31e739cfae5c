package dataplane

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/routes"
)

func TestParseWriteRequestIsStrict(t *testing.T) {
	const at = `"issued_at":"2026-12-01T15:04:05.123Z"`
	for _, tc := range []struct{ payload, err, id string }{
		{`{"id":"a","tag":"t","value":1.5,` + at + `}`, "", "a"},
		{`{"id":"a","tag":"t","value":"x",` + at + `,"expires_at":"2026-12-01T15:04:06Z"}`, "", "a"},
		{`{"id":"a","tag":"t","value":1,` + at + `} `, "", "a"},
		{`{"id":"a","tag":"t","value":1,` + at + `}{}`, "trailing data after the JSON object", "a"},
		{`{"id":"a","tag":"t","value":1,` + at + `}x`, "trailing data after the JSON object", "a"},
		{`{"id":"a","id":"b","tag":"t","value":1,` + at + `}`, `duplicate key "id"`, "a"},
		{`{"id":"a","tag":"t","value":1,` + at + `,"Value":2}`, `unknown key "Value"`, "a"},
		{`{"id":"a","tag":"t","value":null,` + at + `}`, "value: null is not a value", "a"},
		{`{"id":"a","tag":"t","value":[1],` + at + `}`, "value: want a string, number or boolean", "a"},
		{`{"id":7,"tag":"t","value":1,` + at + `}`, "id: want a string", ""},
		{`{"id":"","tag":"t","value":1,` + at + `}`, "id of 0 bytes: want 1 to 128", ""},
		{`{"tag":"t","value":1,` + at + `}`, "id is required", ""},
		{`{"id":"a","tag":"t","value":1}`, "issued_at is required", "a"},
		{`{"id":"a","tag":"t","value":1,"issued_at":"yesterday"}`, "issued_at: want an RFC 3339 time", "a"},
		{`{"id":"a","tag":"t","value":1,"issued_at":"2026-12-01T15:04:05"}`, "issued_at: want an RFC 3339 time", "a"},
		{`{"id":"a","tag":"t","value":1,` + at + `,"expires_at":"2026-12-01T15:04:04Z"}`, "expires_at is before issued_at", "a"},
		{`[1]`, "want a JSON object", ""},
		{`{"id":"a",`, "malformed JSON", "a"},
		{strings.Repeat(" ", MaxWriteRequestBytes+1), "request of 4097 bytes exceeds 4096", ""},
	} {
		req, err := parseWriteRequest([]byte(tc.payload))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%.60s: %v", tc.payload, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%.60s: error %v, want %q", tc.payload, err, tc.err)
		case req.id != tc.id:
			t.Errorf("%.60s: id %q, want %q", tc.payload, req.id, tc.id)
		}
	}
}

// The worst a request can make a reply hold: id, tag and message of
// characters JSON escapes six-fold, cut to their bounds.
func TestReplyIsBounded(t *testing.T) {
	w := &writer{t: &Term{spec: Spec{Session: "press-1", Epoch: 7}}, route: &routes.Route{Name: "press-1-commands"}}
	evil := strings.Repeat("\x01<", 1<<16)
	rep := w.reply(writeReq{id: evil, tag: evil}, WriteDeviceError, evil)
	age := int64(-1 << 62)
	rep.AgeMS, rep.LimitMS = &age, &age
	rep.Timestamp = time.Now().UnixMilli()
	b, _ := json.Marshal(rep)
	if len(b) > MaxWriteReplyBytes {
		t.Errorf("reply of %d bytes, more than %d", len(b), MaxWriteReplyBytes)
	}
	if !strings.Contains(rep.ID, "bytes cut]") || !strings.Contains(rep.Message, "bytes cut]") {
		t.Errorf("a cut is not marked: id %.20q message %.20q", rep.ID, rep.Message)
	}
	if got := bounded("aé", 2); got != "a...[2 bytes cut]" {
		t.Errorf("cut inside a character: %q", got)
	}
}

// TestStaleAgeReadable: a write issued years ago was refused as
// "issued 60653h41m8.562837739s ago".
func TestStaleAgeReadable(t *testing.T) {
	w := &writer{t: &Term{spec: Spec{Session: "press-1", Epoch: 7}}, route: &routes.Route{Name: "press-1-commands", MaxAge: routes.Duration(30 * time.Second)}}
	now := time.Date(2026, 12, 4, 21, 0, 0, 562837739, time.UTC)
	for issued, want := range map[time.Time]string{
		time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC):         "issued 2529.9 days ago, more than max_age 30s",
		now.Add(-90*time.Minute - 1234567*time.Microsecond): "issued 1h30m1s ago, more than max_age 30s",
		now.Add(-31234567 * time.Microsecond):               "issued 31.235s ago, more than max_age 30s",
	} {
		rep := w.fresh(writeReq{id: "a", tag: "t", issued: issued}, now)
		if rep == nil || rep.Message != want {
			t.Errorf("issued %v: reply %+v, want %q", issued, rep, want)
		}
	}
}
