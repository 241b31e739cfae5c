// Command ociimage builds the leasebridge container image, the same image
// as the Dockerfile, without a Docker daemon or a base image: one layer
// holding the static binary, the build machine's CA bundle and an
// /etc/passwd entry for uid 65532, written as a tarball that `docker load`,
// `podman load` and `crane push` accept. scripts/image runs it; it is a
// separate command so the shipped binary does not link
// go-containerregistry.
package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	lbinfo "github.com/leasebridge/leasebridge/internal/buildinfo"
)

// The image's fixed layout; the Dockerfile uses the same paths and user.
const (
	binaryPath = "/usr/local/bin/leasebridge"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	uid        = 65532
)

// errNotStatic: the image has no C library, so only a CGO_ENABLED=0 binary
// runs in it.
var errNotStatic = errors.New("ociimage: binary was not built with CGO_ENABLED=0")

// Options say what goes into the image.
type Options struct {
	// Binary is a linux leasebridge built with CGO_ENABLED=0.
	Binary string
	// CA is the CA bundle copied to caPath.
	CA string
	// Repository names the image; its tag is the binary's version.
	Repository string
}

func main() {
	var o Options
	flag.StringVar(&o.Binary, "binary", "", "static leasebridge binary (CGO_ENABLED=0)")
	flag.StringVar(&o.CA, "ca", caPath, "CA certificate bundle to include")
	flag.StringVar(&o.Repository, "repository", "leasebridge", "image repository; the tag is the binary's version")
	out := flag.String("out", "leasebridge-image.tar", "image tarball to write")
	flag.Parse()
	tag, err := Write(*out, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s\n", *out, tag)
}

// Write builds the image and writes it to out as a tarball; it returns the
// image's name.
func Write(out string, o Options) (name.Tag, error) {
	img, tag, err := Build(o)
	if err != nil {
		return name.Tag{}, err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return name.Tag{}, fmt.Errorf("ociimage: write %s: %w", out, err)
	}
	return tag, nil
}

// Build assembles the image and its name.
func Build(o Options) (v1.Image, name.Tag, error) {
	bi, err := buildinfo.ReadFile(o.Binary)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("ociimage: read build info of %s: %w", o.Binary, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" {
		return nil, name.Tag{}, fmt.Errorf("%w (CGO_ENABLED=%q GOOS=%q): %s", errNotStatic, settings["CGO_ENABLED"], settings["GOOS"], o.Binary)
	}
	info := lbinfo.FromBuildInfo(bi)
	tag, err := name.NewTag(o.Repository + ":" + TagFor(info.Version))
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("ociimage: image name: %w", err)
	}
	created := time.Unix(0, 0).UTC()
	if t, err := time.Parse(time.RFC3339, info.Time); err == nil {
		created = t
	}
	layer, err := rootLayer(o, created)
	if err != nil {
		return nil, name.Tag{}, err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("ociimage: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("ociimage: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", settings["GOARCH"], v1.Time{Time: created}
	cf.Config = imageConfig(info)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("ociimage: %w", err)
	}
	return img, tag, nil
}

// imageConfig is the run configuration: the Dockerfile's USER, ENTRYPOINT,
// ENV and LABEL lines.
func imageConfig(info lbinfo.Info) v1.Config {
	return v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"--help"},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caPath},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "leasebridge",
			"org.opencontainers.image.version":  info.Version,
			"org.opencontainers.image.revision": info.Revision,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
}

var tagUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// TagFor turns a module version into an image tag: "+dirty" becomes
// "-dirty", "(devel)" becomes "devel".
func TagFor(version string) string {
	t := tagUnsafe.ReplaceAllString(version, "-")
	t = regexp.MustCompile(`^-+|-+$`).ReplaceAllString(t, "")
	if t == "" {
		return "devel"
	}
	return t
}

// rootLayer is the image's only layer.
func rootLayer(o Options, mtime time.Time) (v1.Layer, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	ca, err := os.ReadFile(o.CA)
	if err != nil {
		return nil, fmt.Errorf("ociimage: CA bundle: %w", err)
	}
	entries := []entry{
		{path: "etc/", mode: 0o755}, {path: "etc/ssl/", mode: 0o755}, {path: "etc/ssl/certs/", mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid))},
		{path: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid))},
		{path: caPath[1:], mode: 0o644, data: ca},
		{path: "home/", mode: 0o755}, {path: "home/nonroot/", mode: 0o700, owner: uid},
		{path: "tmp/", mode: 0o1777},
		{path: "usr/", mode: 0o755}, {path: "usr/local/", mode: 0o755}, {path: "usr/local/bin/", mode: 0o755},
		{path: binaryPath[1:], mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := e.write(tw, mtime); err != nil {
			return nil, fmt.Errorf("ociimage: layer %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// entry is one file or directory (path ending in /) of the layer.
type entry struct {
	path  string
	mode  int64
	owner int
	data  []byte
}

func (e entry) write(tw *tar.Writer, mtime time.Time) error {
	h := &tar.Header{Name: e.path, Mode: e.mode, Uid: e.owner, Gid: e.owner, ModTime: mtime, Format: tar.FormatPAX}
	if e.path[len(e.path)-1] == '/' {
		h.Typeflag = tar.TypeDir
	} else {
		h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(e.data)
	return err
}
