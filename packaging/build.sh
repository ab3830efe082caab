#!/bin/sh
# build.sh: build edgeheal (the agent), edgeheal-fleet (the fleet view) and
# edgeheal-kube (the Kubernetes reporter) for amd64 and arm64 and package
# each as .deb and .rpm into dist/ (`make package` runs this):
# packaging/nfpm.yaml, packaging/fleet/nfpm.yaml and
# packaging/kubernetes/nfpm.yaml.
# Run from anywhere; it works in the repository root.
#
#   VERSION   package version (default: the git tag without its v, or
#             0.1.0~git<commit date>.<short hash> for an untagged commit)
#   ARCHES    architectures to build (default: "amd64 arm64")
#   DIST      output directory (default: dist)
#   BIN       where the binaries go, as BIN/linux_ARCH/edgeheal,
#             BIN/linux_ARCH/edgeheal-fleet and BIN/linux_ARCH/edgeheal-kube
#             (default: bin)
#   TOOLS     where the pinned nfpm is built once and kept (default: bin/.tools)
#   NFPM      the nfpm command (default: nfpm $NFPM_VERSION, built once with
#             go install into TOOLS and reused)
set -eu

cd "$(dirname "$0")/.."
GO=${GO:-go}
NFPM_VERSION=v2.45.2
ARCHES=${ARCHES:-"amd64 arm64"}
DIST=${DIST:-dist}
BIN=${BIN:-bin}
TOOLS=${TOOLS:-bin/.tools}

if [ -z "${VERSION:-}" ]; then
	if tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
		VERSION=${tag#v}
	else
		VERSION="0.1.0~git$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || echo 0).$(git rev-parse --short=7 HEAD 2>/dev/null || echo dev)"
	fi
fi
# Reproducible archives: every file's mtime is the commit's time.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export VERSION SOURCE_DATE_EPOCH

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$DIST"
rm -f "$DIST"/edgeheal_*.deb "$DIST"/edgeheal-*.rpm "$DIST"/edgeheal-fleet_*.deb "$DIST"/edgeheal-kube_*.deb   # only this build's packages

# The pinned nfpm, built once (go run would link it again on every call).
if [ -z "${NFPM:-}" ]; then
	mkdir -p "$TOOLS"
	NFPM="$(cd "$TOOLS" && pwd)/nfpm-$NFPM_VERSION"
	if [ ! -x "$NFPM" ]; then
		GOBIN="$work/tools" CGO_ENABLED=0 $GO install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
		mv "$work/tools/nfpm" "$NFPM"
	fi
fi

# Architecture-independent generated files: gzip -9n as Debian wants them.
gzip -9nc packaging/edgeheal.1 >"$work/edgeheal.1.gz"
gzip -9nc README.md >"$work/README.md.gz"
# The operator's half of the manual goes with the package.
gzip -9nc docs/configuration.md >"$work/configuration.md.gz"
gzip -9nc docs/operations.md >"$work/operations.md.gz"
mkdir -p "$work/operations"
for f in docs/operations/*.md; do gzip -9nc "$f" >"$work/operations/$(basename "$f").gz"; done
# The Kubernetes part of the manual is edgeheal-kube's, in its package.
mv "$work/operations/kubernetes.md.gz" "$work/kubernetes.md.gz"
gzip -9nc packaging/fleet/edgeheal-fleet.1 >"$work/edgeheal-fleet.1.gz"
gzip -9nc docs/fleet.md >"$work/fleet.md.gz"
gzip -9nc packaging/kubernetes/edgeheal-kube.1 >"$work/edgeheal-kube.1.gz"

# package ARCH NAME CONFIG FILE...: build ./cmd/NAME for ARCH into
# BIN/linux_ARCH/NAME (with the go build flags in $gcflags, unquoted), stage
# it with the generated FILEs, and package the stage as .deb and .rpm with
# the nfpm CONFIG.
gcflags=""
package() {
	arch=$1 name=$2 config=$3
	shift 3
	stage="$work/$name-$arch"
	mkdir -p "$stage" "$BIN/linux_$arch"
	for f in "$@"; do cp -r "$work/$f" "$stage/"; done
	# shellcheck disable=SC2086 # $gcflags is a list of flags
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch $GO build -trimpath -buildvcs=false $gcflags \
		-ldflags "-s -w -X main.version=$VERSION" -o "$BIN/linux_$arch/$name" "./cmd/$name"
	cp "$BIN/linux_$arch/$name" "$stage/$name"
	for fmt in deb rpm; do
		ARCH=$arch STAGE=$stage $NFPM package --config "$config" --packager "$fmt" --target "$DIST/"
	done
}

for arch in $ARCHES; do
	# The daemon without inlining outside the runtime, as the Makefile
	# builds it (docs/performance.md, "Inlining").
	gcflags="-gcflags=all=-l -gcflags=runtime= -gcflags=internal/runtime/...="
	package "$arch" edgeheal packaging/nfpm.yaml edgeheal.1.gz README.md.gz configuration.md.gz operations.md.gz operations
	gcflags=""
	package "$arch" edgeheal-fleet packaging/fleet/nfpm.yaml edgeheal-fleet.1.gz fleet.md.gz
	package "$arch" edgeheal-kube packaging/kubernetes/nfpm.yaml edgeheal-kube.1.gz kubernetes.md.gz
done
ls -l "$DIST"
