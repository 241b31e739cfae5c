package archtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's top directory, from git.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// trackedFiles lists the files git tracks, relative to root.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files, not this repository's", len(files))
	}
	return files
}

// maxTrackedSize is the largest file the repository may hold: anything
// bigger is a build output, a data set or a capture that a script remakes.
const maxTrackedSize = 1 << 20

// executableMagic are the first bytes of compiled executables: ELF,
// Mach-O (32 and 64 bit, both byte orders, and universal) and PE ("MZ").
var executableMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	[]byte("MZ"),
}

// isExecutable says whether head, a file's first bytes, starts like a
// compiled executable.
func isExecutable(head []byte) bool {
	for _, m := range executableMagic {
		if bytes.HasPrefix(head, m) {
			return true
		}
	}
	return false
}

// No compiled executable and no file over 1 MB is committed: a 28.8 MB
// docgen binary once was.
func TestNoCommittedBinaries(t *testing.T) {
	root := repoRoot(t)
	for _, f := range trackedFiles(t, root) {
		path := filepath.Join(root, f)
		fi, err := os.Lstat(path)
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if fi.Size() > maxTrackedSize {
			t.Errorf("%s is %d bytes, over the %d-byte limit for a committed file", f, fi.Size(), maxTrackedSize)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4)
		n, _ := fh.Read(head)
		fh.Close()
		if isExecutable(head[:n]) {
			t.Errorf("%s is a compiled executable (starts %q); build outputs belong in the build cache or /tmp", f, head[:n])
		}
	}
}

// The magic bytes are recognised: the check above could fail.
func TestExecutableMagic(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if !isExecutable(b[:4]) {
		t.Errorf("this test binary (%q...) is not recognised as an executable", b[:4])
	}
	for _, text := range []string{"package main", "# title", "MARKDOWN", "\x7fEL"} {
		if isExecutable([]byte(text)) {
			t.Errorf("%q taken for an executable", text)
		}
	}
}

// citesOutside are names of files outside the repository that a comment
// or a document once cited; a reader of the repository cannot open them.
var citesOutside = []string{"DESIGN.md", "../shared"}

// Comments and documents cite only files inside the repository.
func TestNoCitationOutsideRepository(t *testing.T) {
	root := repoRoot(t)
	for _, f := range trackedFiles(t, root) {
		if !strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, ".md") && !strings.HasSuffix(f, ".tmpl") {
			continue
		}
		if f == "internal/archtest/hygiene_test.go" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, name := range citesOutside {
				if strings.Contains(line, name) {
					t.Errorf("%s:%d cites %s, which is not in the repository", f, i+1, name)
				}
			}
		}
	}
}
