package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"mqtt://user:s3cret@broker:1883":          "mqtt://user:xxxxx@broker:1883",
		"opc.tcp://op:pw@plc:4840/path":           "opc.tcp://op:xxxxx@plc:4840/path",
		"http://root:etcdpw@10.0.0.1:2379":        "http://root:xxxxx@10.0.0.1:2379",
		"mqtt://user:p@ss@broker:1883":            "mqtt://user:xxxxx@broker:1883",
		"mqtt://user:s3cret@broker:notaport":      "mqtt://user:xxxxx@broker:notaport", // does not parse
		"mqtt://user:s3/cret@broker:1883":         "mqtt://user:xxxxx@broker:1883",     // unescaped "/"
		"user:s3cret@broker:1883":                 "user:xxxxx@broker:1883",            // no scheme
		"mqtt://user:s3cret@broker:1883/a?b=c@d":  "mqtt://user:xxxxx@broker:1883/a?b=c@d",
		"mqtt://user@broker:1883":                 "mqtt://user@broker:1883",
		"tcp://127.0.0.1:1883":                    "tcp://127.0.0.1:1883",
		"%zz://user:s3cret@broker":                "%zz://user:xxxxx@broker",
		"":                                        "",
		"mqtt://us%20er:s%2Fcret@broker:1883/x/y": "mqtt://us%20er:xxxxx@broker:1883/x/y",
	} {
		got := URL(in)
		if got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "cret") || strings.Contains(got, "etcdpw") || strings.Contains(got, ":pw@") {
			t.Errorf("URL(%q) = %q still holds the password", in, got)
		}
	}
	if got := URLs([]string{"http://a:b@h:1", "http://h:2"}); got[0] != "http://a:xxxxx@h:1" || got[1] != "http://h:2" {
		t.Errorf("URLs: %q", got)
	}
}

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		`dial mqtt://u:s3cret@h:1883: refused`:                  `dial mqtt://u:xxxxx@h:1883: refused`,
		`parse "opc.tcp://u:s3cret@h:bad": invalid port`:        `parse "opc.tcp://u:xxxxx@h:bad": invalid port`,
		`a http://x:s3cret@h:1 and ws://y:s3cret@h:2/p done`:    `a http://x:xxxxx@h:1 and ws://y:xxxxx@h:2/p done`,
		`no secret in tcp://127.0.0.1:1883 or mail@example.org`: `no secret in tcp://127.0.0.1:1883 or mail@example.org`,
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}
