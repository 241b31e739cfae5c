package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/leasebridge/leasebridge/routes"
)

// TestDocsUpToDate fails when a generated page was edited by hand or the
// code's numbers changed without `go generate ./internal/docgen`.
func TestDocsUpToDate(t *testing.T) {
	pages, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join("../../docs", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("docs/%s is stale: run `go generate ./internal/docgen`", name)
		}
	}
}

// Every field of the status example is in one of status-json.md's tables.
func TestStatusJSONFieldsDocumented(t *testing.T) {
	ex, err := statusExample()
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal([]byte(ex), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !strings.Contains(statusJSONTmpl, "`"+k+"`") {
					t.Errorf("status JSON field %q is not documented in status-json.md.tmpl", k)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
}

// TestNoSentenceRepeated fails when a generated page says the same
// sentence twice (admit-json.md once described its JSON shape twice,
// one copy out of date): prose outside tables and code, sentences of 40
// characters or more.
func TestNoSentenceRepeated(t *testing.T) {
	pages, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for name, page := range pages {
		if d := repeatedSentence(string(page)); d != "" {
			t.Errorf("docs/%s repeats %q", name, d)
		}
	}
}

var (
	codeBlock = regexp.MustCompile("(?s)```.*?```")
	sentence  = regexp.MustCompile(`[^.!?]+[.!?]`)
)

// repeatedSentence is the first sentence page says twice, or "".
func repeatedSentence(page string) string {
	var prose []string
	for _, l := range strings.Split(codeBlock.ReplaceAllString(page, ""), "\n") {
		if !strings.HasPrefix(l, "|") {
			prose = append(prose, l)
		}
	}
	seen := map[string]bool{}
	for _, s := range sentence.FindAllString(strings.Join(strings.Fields(strings.Join(prose, " ")), " "), -1) {
		s = strings.TrimSpace(s)
		if len(s) < 40 {
			continue
		}
		if seen[s] {
			return s
		}
		seen[s] = true
	}
	return ""
}

func TestRepeatedSentenceFound(t *testing.T) {
	old := "With `--json` one object is printed. Its shape is stable: fields are added, never renamed or removed.\n" +
		"With `--format json` one object is printed. Its shape is stable: fields are added, never renamed or removed.\n"
	if repeatedSentence(old) == "" {
		t.Error("the old admit-json.md paragraph pair is not caught")
	}
}

// TestConfigurationNamesNoGoFields: configuration.md is generated from
// the config types' doc comments, and a comment naming a Go field
// ("PreferredNode, when set", "KeyFile", "To is") leaked that name to a
// page whose readers know only the YAML keys.
func TestConfigurationNamesNoGoFields(t *testing.T) {
	pages, err := render()
	if err != nil {
		t.Fatal(err)
	}
	page := string(pages["configuration.md"])
	names := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || names[ty.Name()] {
			return
		}
		names[ty.Name()] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			key := strings.Split(f.Tag.Get("yaml"), ",")[0]
			// A name that differs from its key is a leak wherever it
			// stands mid-sentence; one that is its key capitalized
			// ("Spread", "To") where a comment made it a subject.
			mid := regexp.MustCompile(`[^.|]\s+` + f.Name + `\b`)
			subject := regexp.MustCompile(`\b` + f.Name + `(, when| is| are)\b`)
			if key != "" && key != "-" && ((!strings.EqualFold(key, f.Name) && mid.MatchString(page)) || subject.MatchString(page)) {
				t.Errorf("configuration.md names the Go field %s (key %s)", f.Name, key)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(routes.Config{}))
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var listen, run string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "| `http_listen` |") {
			listen = l
		}
	}
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| `leasebridge run ") {
			run = l
		}
	}
	// Every path `run` serves on http_listen.
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/sessions", "/fleet", "fleet page at"} {
		if !strings.Contains(listen, path) || !strings.Contains(run, path) {
			t.Errorf("%s is missing from configuration.md's http_listen row or README's run row", path)
		}
	}
}
