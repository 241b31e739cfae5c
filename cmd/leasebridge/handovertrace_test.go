package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// traceLine is one log line of a bridge during a handover.
type traceLine struct {
	at   time.Time
	node string
	msg  string
	rest string // the attributes worth printing
}

// handoverTrace reads the bridges' JSON logs (run with --log-level debug)
// and returns their lines in [from, to], in time order: where a
// handover's milliseconds go, from the request to the first value.
func handoverTrace(t *testing.T, from, to time.Time, procs ...*mixedProc) []traceLine {
	t.Helper()
	var out []traceLine
	for _, p := range procs {
		f, err := os.Open(p.log)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			ts, _ := m["time"].(string)
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || at.Before(from) || at.After(to) {
				continue
			}
			var rest []string
			for _, k := range []string{"transport", "took", "epoch", "err"} {
				if v, ok := m[k]; ok && v != nil {
					rest = append(rest, fmt.Sprintf("%s=%v", k, v))
				}
			}
			msg, _ := m["msg"].(string)
			out = append(out, traceLine{at: at, node: p.name, msg: msg, rest: strings.Join(rest, " ")})
		}
		f.Close()
	}
	slices.SortStableFunc(out, func(a, b traceLine) int { return a.at.Compare(b.at) })
	return out
}

// logTrace prints a trace with each line's offset from start.
func logTrace(t *testing.T, start time.Time, lines []traceLine) {
	t.Helper()
	slices.SortStableFunc(lines, func(a, b traceLine) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %+8.1f ms  %s  %s  %s\n", float64(l.at.Sub(start))/float64(time.Millisecond), l.node, l.msg, l.rest)
	}
	t.Logf("trace from the handover request:\n%s", b.String())
}

// phase is the first line of node whose message starts with msg, at or
// after after; ok false when there is none.
func phase(lines []traceLine, node, msg string, after time.Time) (time.Time, bool) {
	for _, l := range lines {
		if l.node == node && strings.HasPrefix(l.msg, msg) && !l.at.Before(after) {
			return l.at, true
		}
	}
	return time.Time{}, false
}
