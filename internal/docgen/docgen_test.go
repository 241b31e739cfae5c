package main

import (
	"bytes"
	"os"
	"path/filepath"
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
