package main

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	lbinfo "github.com/leasebridge/leasebridge/internal/buildinfo"
)

var (
	releaseOnce sync.Once
	releaseDir  string
	releaseErr  error
)

// release runs scripts/release for this machine's architecture into a
// temporary directory, once per test process.
func release(t *testing.T) string {
	t.Helper()
	releaseOnce.Do(func() {
		releaseDir, releaseErr = os.MkdirTemp("", "leasebridge-release-")
		if releaseErr != nil {
			return
		}
		out, err := exec.Command("bash", "../../scripts/release", releaseDir, runtime.GOARCH).CombinedOutput()
		if err != nil {
			releaseErr = errors.New("scripts/release: " + err.Error() + "\n" + string(out))
		}
	})
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseDir
}

// scripts/release writes a static, trimmed binary and SHA256SUMS that
// match it.
func TestReleaseBinaryAndChecksums(t *testing.T) {
	dir := release(t)
	bin := "leasebridge-linux-" + runtime.GOARCH
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, bin))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if want := hex.EncodeToString(sum[:]) + "  " + bin + "\n"; string(sums) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s", sums, want)
	}
	f, err := elf.Open(filepath.Join(dir, bin))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader: not a static binary", bin)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table: not linked with -s", bin)
	}
	out, err := exec.Command("go", "version", "-m", filepath.Join(dir, bin)).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\tbuild\t-trimpath=true\n", "\tbuild\tCGO_ENABLED=0\n", "\tbuild\tGOARCH=" + runtime.GOARCH + "\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go version -m lacks %q:\n%s", want, out)
		}
	}
}

// The image tarball holds exactly the binary, the CA bundle and the
// passwd/group files; its configuration runs the binary as uid 65532; and
// the binary, run from the unpacked image (chrooted into it as uid 65532
// when the test runs as root), prints its version and admits an example.
func TestImageRunsFromItsOwnFilesystem(t *testing.T) {
	bin := filepath.Join(release(t), "leasebridge-linux-"+runtime.GOARCH)
	out := filepath.Join(t.TempDir(), "image.tar")
	tag, err := Write(out, Options{Binary: bin, CA: caPath, Repository: "leasebridge"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != binaryPath || cf.Architecture != runtime.GOARCH || cf.OS != "linux" {
		t.Errorf("config: user %q entrypoint %v platform %s/%s", c.User, c.Entrypoint, cf.OS, cf.Architecture)
	}
	info, err := lbinfo.FromBinary(bin)
	if err != nil {
		t.Fatal(err)
	}
	if c.Labels["org.opencontainers.image.version"] != info.Version || c.Labels["org.opencontainers.image.revision"] != info.Revision || tag.TagStr() != TagFor(info.Version) {
		t.Errorf("labels %v, tag %s; the binary says %+v", c.Labels, tag, info)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	root := unpack(t, mutate.Extract(img))
	files := listFiles(t, root)
	if want := "etc/group etc/passwd etc/ssl/certs/ca-certificates.crt usr/local/bin/leasebridge"; files != want {
		t.Errorf("image files: %s; want %s", files, want)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no uid 65532:\n%s", passwd)
	}

	if err := os.MkdirAll(filepath.Join(root, "etc/leasebridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("../../examples/standalone-gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/leasebridge/config.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	version := runInImage(t, root, c.Env, "version")
	if want := info.String() + "\n"; version != want {
		t.Errorf("version in the image: %q, want %q", version, want)
	}
	if admit := runInImage(t, root, c.Env, "admit", "-c", "/etc/leasebridge/config.yaml"); !strings.Contains(admit, "session(s) admitted") {
		t.Errorf("admit in the image:\n%s", admit)
	}
}

// runInImage runs the image's entrypoint with args, chrooted into root as
// uid 65532 when the test may (it runs as root), else from root's path.
func runInImage(t *testing.T, root string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, binaryPath), args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command(binaryPath, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		cmd.Dir = "/"
	} else {
		t.Logf("not root: running %s without chroot", binaryPath)
		for i, a := range args {
			if strings.HasPrefix(a, "/etc/") {
				args[i] = filepath.Join(root, a)
			}
		}
		cmd.Args = append(cmd.Args[:1], args...)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v in the image: %v\n%s", args, err, out)
	}
	return string(out)
}

// unpack writes the flattened image file system into a new directory.
func unpack(t *testing.T, rc io.ReadCloser) string {
	t.Helper()
	defer rc.Close()
	root := t.TempDir()
	// The chrooted user must be able to walk the root.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode).Perm())
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(h.Mode).Perm())
		default:
			t.Errorf("unexpected entry %s (type %c)", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if _, err := io.Copy(w, r); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// listFiles lists the regular files under root, sorted, space-separated.
func listFiles(t *testing.T, root string) string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(files, " ")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if releaseDir != "" {
		_ = os.RemoveAll(releaseDir)
	}
	os.Exit(code)
}
