package routes

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxTopicLen is MQTT's limit on a topic's encoded length.
const maxTopicLen = 65535

// checkTopicName checks a topic that is published to: MQTT forbids the
// wildcards + and # there.
func checkTopicName(t string) error {
	if err := checkTopicText(t); err != nil {
		return err
	}
	if strings.ContainsAny(t, "+#") {
		return fmt.Errorf("topic %q: a topic that is published to cannot hold the wildcards + or #", t)
	}
	return nil
}

// checkTopicFilter checks a subscription filter: + must fill a whole level
// and # must be the whole last level.
func checkTopicFilter(f string) error {
	if err := checkTopicText(f); err != nil {
		return err
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case strings.Contains(l, "#") && (l != "#" || i != len(levels)-1):
			return fmt.Errorf("filter %q: # must be the whole last level (a/#), level %d is %q", f, i+1, l)
		case strings.Contains(l, "+") && l != "+":
			return fmt.Errorf("filter %q: + must be a whole level (a/+/b), level %d is %q", f, i+1, l)
		}
	}
	return nil
}

func checkTopicText(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("empty topic")
	case len(t) > maxTopicLen:
		return fmt.Errorf("topic of %d bytes: MQTT allows at most %d", len(t), maxTopicLen)
	case !utf8.ValidString(t) || strings.ContainsRune(t, 0):
		return fmt.Errorf("topic %q: must be UTF-8 without NUL", t)
	}
	return nil
}
