package mqtt

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/transports"
)

func TestEncodeValue(t *testing.T) {
	ts := time.UnixMilli(1764556800123)
	b, err := EncodeValue(transports.Value{Tag: "t", Value: 21.5, Quality: transports.Good, Timestamp: ts}, 9)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"timestamp":1764556800123,"value":21.5,"quality":"good","epoch":9}` {
		t.Fatalf("good value: %s", b)
	}
	b, err = EncodeValue(transports.Value{Tag: "t", Value: 1, Err: errors.New("timeout"), Timestamp: ts}, 9)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"timestamp":1764556800123,"quality":"bad","error":"timeout","epoch":9}` {
		t.Fatalf("bad value: %s", b)
	}
	// A zero value is a value, not an absent one.
	b, err = EncodeValue(transports.Value{Tag: "z", Value: 0, Quality: transports.Good, Timestamp: ts}, 1)
	if err != nil || string(b) != `{"timestamp":1764556800123,"value":0,"quality":"good","epoch":1}` {
		t.Fatalf("zero value: %s %v", b, err)
	}
	if _, err := EncodeValue(transports.Value{Tag: "ch", Value: make(chan int)}, 1); err == nil {
		t.Fatal("unencodable value accepted")
	}
}

func TestEncodeGroup(t *testing.T) {
	t1, t2 := time.UnixMilli(1000), time.UnixMilli(2000)
	b, err := EncodeGroup([]transports.Value{
		{Tag: "a", Value: true, Quality: transports.Good, Timestamp: t1},
		{Tag: "b", Err: errors.New("illegal address"), Timestamp: t2},
	}, 4)
	if err != nil {
		t.Fatal(err)
	}
	var g GroupMessage
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if g.Timestamp != 2000 || g.Epoch != 4 || g.Values["a"] != true || g.Errors["b"] != "illegal address" || len(g.Values) != 1 {
		t.Fatalf("group %s", b)
	}
}

func TestEncodeStatus(t *testing.T) {
	b := EncodeStatus(StatusMessage{Session: "s", Owner: "o", Epoch: 2, State: StateServing, ServiceLevelFull: true, Timestamp: 5})
	if string(b) != `{"session":"s","owner":"o","epoch":2,"state":"serving","service_level_full":true,"timestamp":5}` {
		t.Fatalf("status %s", b)
	}
	var s StatusMessage
	if err := json.Unmarshal(EncodeStatus(StatusMessage{State: StateLost}), &s); err != nil || s.Timestamp == 0 {
		t.Fatalf("zero timestamp not filled: %+v %v", s, err)
	}
}
