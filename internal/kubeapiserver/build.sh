#!/usr/bin/env bash
# Builds the test harness's kube-apiserver (this directory's module) once and
# prints the binary's path. The binary lives outside the repository, in the
# Go build cache directory under a name keyed by this module's files, so a
# changed go.mod, go.sum or main.go builds anew and an unchanged one is
# reused. Exits non-zero when the build fails: tests that need the API
# server fail rather than skip. A cold build takes about 11 minutes of one
# core and 2 GB of memory.
set -euo pipefail
cd "$(dirname "$0")"

version=v1.34.4
key=$(cat go.mod go.sum main.go | sha256sum | cut -c1-16)
dir=${LEASEBRIDGE_KUBE_APISERVER_DIR:-$(go env GOCACHE)/leasebridge-kube-apiserver}
bin="$dir/kube-apiserver-$version-$key"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$dir"
pkg=k8s.io/component-base/version
# kubectl and client-go parse the server's version; without these the
# binary reports v0.0.0-master.
ldflags="-X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=34"
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
echo "kube-apiserver harness: building $version (cold: ~11 min)" >&2
GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "$ldflags" -o "$tmp" . >&2
mv "$tmp" "$bin"
echo "$bin"
