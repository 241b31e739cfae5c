package mqtt

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

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

// Session states carried on the status topic.
const (
	// StateActive: the owner holds the lease and its broker connection is
	// up; devices may still be activating.
	StateActive = "active"
	// StateServing: ServiceLevelFull, the owner is connected, subscribed and
	// has published its first good value.
	StateServing = "serving"
	// StateDegraded: the owner serves, but a device does not answer; its
	// values are published with bad quality until it does.
	StateDegraded = "degraded"
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
//
// Timestamp is when the reported event happened. The last will ("lost")
// has none: it is fixed when the connection is made and the broker
// publishes it when it notices the loss, an instant its owner cannot know;
// it carries ConnectedAt, the start of the connection it ends.
type StatusMessage struct {
	Session          string `json:"session"`
	Owner            string `json:"owner"`
	Node             string `json:"node,omitempty"`
	Epoch            uint64 `json:"epoch"`
	State            string `json:"state"`
	ServiceLevelFull bool   `json:"service_level_full"`
	Timestamp        int64  `json:"timestamp,omitempty"`
	ConnectedAt      int64  `json:"connected_at,omitempty"`
}

// EncodeValue renders one value with the session's epoch. The bytes are
// exactly those json.Marshal gives for the ValueMessage (field order,
// number formatting, string escaping, HTML-safe escapes included), built
// without reflection for the values transports decode (bools, Go numbers,
// strings); any other value is rendered by json.Marshal. Like
// json.Marshal it refuses NaN and infinities, and values JSON cannot
// carry, with a *json.UnsupportedValueError or *json.UnsupportedTypeError.
func EncodeValue(v transports.Value, epoch uint64) ([]byte, error) {
	quality, errText := string(v.Quality), ""
	if quality == "" {
		quality = string(transports.Good)
	}
	if v.Err != nil {
		quality = string(transports.Bad)
		errText = v.Err.Error()
	}
	// Most payloads fit: build on the stack, return one exact allocation.
	var stack [128]byte
	b := append(stack[:0], `{"timestamp":`...)
	b = strconv.AppendInt(b, millis(v.Timestamp), 10)
	if quality == string(transports.Good) && v.Value != nil {
		b = append(b, `,"value":`...)
		var err error
		if b, err = appendJSONValue(b, v.Value); err != nil {
			return nil, fmt.Errorf("mqtt: encode value of tag %q: %w", v.Tag, err)
		}
	}
	b = append(b, `,"quality":`...)
	b = appendJSONString(b, quality)
	if errText != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, errText)
	}
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, epoch, 10)
	b = append(b, '}')
	return append([]byte(nil), b...), nil
}

// appendJSONValue appends x as encoding/json renders it.
func appendJSONValue(b []byte, x any) ([]byte, error) {
	switch x := x.(type) {
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int8:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint8:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case float32:
		if !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) {
			return appendJSONFloat(b, float64(x), 32), nil
		}
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			return appendJSONFloat(b, x, 64), nil
		}
	case string:
		return appendJSONString(b, x), nil
	}
	// Everything else, and the refusals, exactly as encoding/json has them.
	j, err := json.Marshal(x)
	if err != nil {
		return b, err
	}
	return append(b, j...), nil
}

// appendJSONFloat is encoding/json's float encoding: ES6 number to string,
// 'e' notation below 1e-6 and from 1e21, exponents without padding. f is
// finite; bits is 32 or 64.
func appendJSONFloat(b []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	format := byte('f')
	// float32 comparisons for a float32, as encoding/json does, to get
	// the cutoffs right.
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// e-09 becomes e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString is encoding/json's string encoding with HTML escaping
// (what json.Marshal does): quotes, backslashes and control characters
// escaped, <, > and & as \u003c, \u003e and \u0026, invalid UTF-8 as
// \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// EncodeStatus renders a status message; a zero Timestamp becomes now,
// except for the last will ("lost"), whose zero ConnectedAt becomes now.
func EncodeStatus(s StatusMessage) []byte {
	switch {
	case s.State == StateLost && s.ConnectedAt == 0:
		s.ConnectedAt = millis(time.Now())
	case s.State != StateLost && s.Timestamp == 0:
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
