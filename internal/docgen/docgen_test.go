package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
