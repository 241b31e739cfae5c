package mqtt

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasebridge/leasebridge/transports"
)

// ValueMessage is the JSON payload of one tag's value on its own topic:
//
//	{"timestamp":1764556800123,"value":21.5,"quality":"good","epoch":7}
//
// timestamp is Unix milliseconds of the read (as Neuron and Kepware use);
// value is the decoded value (absent when the read failed); quality is
// "good" or "bad"; error says why a bad read failed; epoch is the
// session's lease epoch, so a consumer can drop messages from a stale owner
// (MQTT 3.1.1 has no user properties to carry it).
type ValueMessage struct {
	Timestamp int64  `json:"timestamp"`
	Value     any    `json:"value,omitempty"`
	Quality   string `json:"quality"`
	Error     string `json:"error,omitempty"`
	Epoch     uint64 `json:"epoch"`
}

// GroupMessage is the JSON payload of a whole poll group on one topic, in
// Neuron's shape plus quality and epoch:
//
//	{"timestamp":1764556800123,"values":{"temp":21.5},"errors":{"level":"timeout"},"epoch":7}
//
// values holds every good tag, errors every bad one.
type GroupMessage struct {
	Timestamp int64             `json:"timestamp"`
	Values    map[string]any    `json:"values"`
	Errors    map[string]string `json:"errors,omitempty"`
	Epoch     uint64            `json:"epoch"`
}

// Session states carried on the status topic.
const (
	// StateActive: the owner holds the lease and its broker connection is
	// up; devices may still be activating.
	StateActive = "active"
	// StateServing: ServiceLevelFull, the owner is connected, subscribed and
	// has published its first good value.
	StateServing = "serving"
	// StateReleased: the owner gave the lease up in an orderly way.
	StateReleased = "released"
	// StateLost: the broker published the owner's last will: its
	// connection ended without a DISCONNECT.
	StateLost = "lost"
)

// StatusMessage is the retained JSON payload of a session's status topic:
//
//	{"session":"press-1","owner":"gw-a-8f3k","node":"gw-a","epoch":7,
//	 "state":"serving","service_level_full":true,"timestamp":1764556800123}
type StatusMessage struct {
	Session          string `json:"session"`
	Owner            string `json:"owner"`
	Node             string `json:"node,omitempty"`
	Epoch            uint64 `json:"epoch"`
	State            string `json:"state"`
	ServiceLevelFull bool   `json:"service_level_full"`
	Timestamp        int64  `json:"timestamp"`
}

// EncodeValue renders one value with the session's epoch.
func EncodeValue(v transports.Value, epoch uint64) ([]byte, error) {
	m := ValueMessage{Timestamp: millis(v.Timestamp), Quality: string(v.Quality), Epoch: epoch}
	if m.Quality == "" {
		m.Quality = string(transports.Good)
	}
	if v.Err != nil {
		m.Quality = string(transports.Bad)
		m.Error = v.Err.Error()
	}
	if m.Quality == string(transports.Good) {
		m.Value = v.Value
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("mqtt: encode value of tag %q: %w", v.Tag, err)
	}
	return b, nil
}

// EncodeGroup renders a poll group's values with the session's epoch; the
// message timestamp is the latest read's.
func EncodeGroup(vs []transports.Value, epoch uint64) ([]byte, error) {
	m := GroupMessage{Values: map[string]any{}, Epoch: epoch}
	var latest time.Time
	for _, v := range vs {
		if v.Timestamp.After(latest) {
			latest = v.Timestamp
		}
		if v.Err != nil || v.Quality == transports.Bad {
			if m.Errors == nil {
				m.Errors = map[string]string{}
			}
			msg := "bad quality"
			if v.Err != nil {
				msg = v.Err.Error()
			}
			m.Errors[v.Tag] = msg
			continue
		}
		m.Values[v.Tag] = v.Value
	}
	m.Timestamp = millis(latest)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("mqtt: encode group: %w", err)
	}
	return b, nil
}

// EncodeStatus renders a status message; a zero Timestamp becomes now.
func EncodeStatus(s StatusMessage) []byte {
	if s.Timestamp == 0 {
		s.Timestamp = millis(time.Now())
	}
	b, err := json.Marshal(s)
	if err != nil {
		// Only strings, integers and booleans: cannot fail.
		panic(fmt.Sprintf("mqtt: encode status: %v", err))
	}
	return b
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
