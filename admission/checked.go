package admission

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrOverflow reports that a budget term does not fit in int64 nanoseconds.
// Admission refuses such a configuration instead of wrapping around.
var ErrOverflow = errors.New("admission: duration arithmetic overflows int64 nanoseconds")

// calc accumulates checked arithmetic; the first overflow is kept and names
// the term being computed, so a refusal can say which term blew up.
type calc struct {
	err error
}

func (c *calc) fail(term string) time.Duration {
	if c.err == nil {
		c.err = fmt.Errorf("%w: term %s", ErrOverflow, term)
	}
	return 0
}

func (c *calc) add(term string, a, b time.Duration) time.Duration {
	if c.err != nil {
		return 0
	}
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return c.fail(term)
	}
	return a + b
}

func (c *calc) sum(term string, ds ...time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t = c.add(term, t, d)
	}
	return t
}

func (c *calc) mul(term string, a time.Duration, k int64) time.Duration {
	if c.err != nil {
		return 0
	}
	if a == 0 || k == 0 {
		return 0
	}
	p := int64(a) * k
	if p/k != int64(a) || (int64(a) == -1 && k == math.MinInt64) || (k == -1 && int64(a) == math.MinInt64) {
		return c.fail(term)
	}
	return time.Duration(p)
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// PollBoundary is max(1ms, ceil(5*P/4)): the longest jittered acquire poll
// wait, rounded up, that a standby can sleep between two Acquire calls.
func PollBoundary(p time.Duration) (time.Duration, error) {
	// ceil(5P/4) = P + ceil(P/4): no 5P intermediate to overflow.
	var c calc
	b := c.add("poll_boundary", p, time.Duration(ceilDiv(int64(max(p, 0)), 4)))
	if c.err != nil {
		return 0, c.err
	}
	return max(time.Millisecond, b), nil
}

// MinJitteredPoll is max(1ms, P - (P/2)/2): the shortest wait a standby can
// sleep between two Acquire calls. It sizes the number of observation
// rounds that fit into one lease_ttl.
func MinJitteredPoll(p time.Duration) time.Duration {
	return max(time.Millisecond, p-(p/2)/2)
}

// FormatSeconds prints d in seconds exactly, the form refusals use so the
// numbers in a message can be recomputed: a whole number of milliseconds
// without trailing zeros ("1097.5s", "0.045s"), anything finer with all
// nine decimals ("75.555555555s", "18.888888890s"), so that two derived
// values side by side show the same digits.
func FormatSeconds(d time.Duration) string {
	neg := d < 0
	u := uint64(d)
	if neg {
		u = -u
	}
	s := strconv.FormatUint(u/1e9, 10)
	if frac := u % 1e9; frac%1e6 != 0 {
		s += fmt.Sprintf(".%09d", frac)
	} else if frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	}
	if neg {
		s = "-" + s
	}
	return s + "s"
}

// FormatSecondsShort prints d in seconds rounded to two decimals with
// trailing zeros trimmed ("75.56s"), the form of the profile table.
func FormatSecondsShort(d time.Duration) string {
	r := d.Round(10 * time.Millisecond)
	return FormatSeconds(r)
}
