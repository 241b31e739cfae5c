// Package redact keeps passwords written inside URLs (the userinfo of
// mqtt://user:secret@host:1883, opc.tcp://user:pw@plc:4840 or an etcd
// endpoint) out of logs and errors. Every URL taken from a configuration
// file passes through URL before it is printed.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a password; it is what net/url's URL.Redacted writes.
const Mask = "xxxxx"

// URL returns s with the password of its userinfo replaced by Mask; the
// user name stays, so the operator still sees who connects. A string that
// does not parse as a URL is redacted all the same: a malformed URL in a
// configuration error is the likeliest place for a password to leak.
func URL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil && !strings.Contains(u.Host, "@") {
		if strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
			return byHand(s)
		}
		return u.Redacted()
	}
	return byHand(s)
}

// URLs redacts each of ss.
func URLs(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = URL(s)
	}
	return out
}

// byHand redacts what url.Parse refused: the userinfo is whatever comes
// before the last "@" of the authority. The authority is taken to end at
// "?" or "#" only, not "/", so that a password with an unescaped "/" is
// still covered; redacting too much is the safe error.
func byHand(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	rest := s[start:]
	if end := strings.IndexAny(rest, "?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	colon := strings.IndexByte(rest[:at], ':')
	if colon < 0 {
		return s // a user name alone is no secret
	}
	return s[:start+colon+1] + Mask + s[start+at:]
}

// inText finds scheme://user:password@ anywhere in a longer text: a log
// message or an error that a library built from a URL.
var inText = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@"'<>]*):[^\s"'<>]*@`)

// Text redacts every URL password in free text, such as an error message
// that wraps a library's error.
func Text(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return inText.ReplaceAllString(s, "${1}:"+Mask+"@")
}
