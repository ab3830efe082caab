#!/bin/sh
# Builds a real kube-apiserver from the Go module proxy for the Kubernetes
# lab test (internal/testsupport/kubelab), and caches it in a fixed place
# keyed by version. Idempotent: with the binary there it does nothing.
# How and why: docs/lab.md, "A real Kubernetes API server".
#
#   sh scripts/build-kube-apiserver.sh            # or: make kube-apiserver
#
# KUBE_VERSION (default v1.37.2) and KUBE_CACHE (default
# /var/cache/edgeheal-lab) choose what and where; the binary is
# $KUBE_CACHE/kube-apiserver-$KUBE_VERSION. About 5 minutes cold on two
# cores, a 119 MB binary.
set -eu

version="${KUBE_VERSION:-v1.37.2}"
cache="${KUBE_CACHE:-/var/cache/edgeheal-lab}"
out="$cache/kube-apiserver-$version"
if [ -x "$out" ]; then
	exit 0
fi
export PATH="/usr/local/go/bin:$PATH"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
# The staging modules are published as v0.<minor>.<patch> for v1.<minor>.<patch>.
staging="v0.${version#v1.}"
minor="$(echo "$version" | cut -d. -f2)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init edgeheal.invalid/kube-apiserver >/dev/null 2>&1
go mod edit -go=1.26.0 -require="k8s.io/kubernetes@$version"
# k8s.io/kubernetes's own go.mod replaces each staging module with a
# directory of its repository; outside it they come from the proxy.
gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
mods="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod")"
if [ -z "$mods" ]; then
	echo "build-kube-apiserver: no staging replacements in $gomod" >&2
	exit 1
fi
for m in $mods; do
	go mod edit -replace="$m=$m@$staging"
done
go get "k8s.io/kubernetes/cmd/kube-apiserver@$version"
v=k8s.io/component-base/version
go build -trimpath -o kube-apiserver \
	-ldflags "-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor" \
	k8s.io/kubernetes/cmd/kube-apiserver
mkdir -p "$cache"
mv kube-apiserver "$out.tmp"
mv "$out.tmp" "$out"
echo "build-kube-apiserver: $out"
