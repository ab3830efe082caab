#!/bin/sh
# Installs the Debian packages edgeheal's tests use, if any is missing.
# Idempotent: with everything installed it changes nothing and asks
# nothing of the network. `make test` runs it first; so does .ci/run.
#
#   wireguard-tools      wg(8), and reresolve-dns.sh for the benchmark contender
#   mosquitto(-clients)  the real broker for the reporting and probe tests
#   ethtool nftables iproute2 util-linux  the lab's tools (ip, nft, unshare, nsenter)
#   containerd runc containernetworking-plugins  real pod sandboxes for the CRI tests
#   lintian rpm systemd systemd-container dbus  packaging and real-systemd tests
#   prometheus           promtool: checks and unit-tests the fleet view's alert rules
#   prometheus-alertmanager  amtool and a real Alertmanager: the fleet view's inhibitions
#   prometheus-node-exporter  what edgeheal's footprint is measured against (make footprint)
#   chromium             the fleet page's test in a real headless browser
#   etcd-server          the storage of the real kube-apiserver of the Kubernetes lab test
#                        (the API server itself: scripts/build-kube-apiserver.sh)
#   qemu-user-static     qemu-aarch64-static: runs the arm64 build's tests and
#                        the arm64 package's binary (make test-arm64, the package test)
#   make git             the build itself
set -eu

pkgs="wireguard-tools mosquitto mosquitto-clients ethtool nftables iproute2 util-linux
containerd runc containernetworking-plugins
lintian rpm systemd systemd-container dbus prometheus prometheus-alertmanager prometheus-node-exporter chromium etcd-server qemu-user-static make git"

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing="$missing $p"
	fi
done
if [ -z "$missing" ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "test-deps: missing Debian packages:$missing" >&2
	echo "test-deps: not root, so not installing them; the tests that need them will fail or skip." >&2
	echo "test-deps: as root: apt-get install -y --no-install-recommends$missing" >&2
	exit 0
fi
echo "test-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: wireguard-tools would otherwise pull in a kernel image.
# shellcheck disable=SC2086 # the list is meant to split
apt-get install -y -qq --no-install-recommends $missing
