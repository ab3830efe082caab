#!/bin/sh
# test-arm64.sh: every test that needs no root, no lab and no system
# service (go test -short) built for arm64 and run on this machine under
# qemu-user (qemu-aarch64-static, from Debian's qemu-user-static, which
# scripts/test-deps.sh installs). `make test-arm64` runs this; so does
# .ci/run. docs/development.md, "Architectures", says what it covers.
#
# It runs go vet for arm64 first. Then it prints each package with its
# counts, the tests skipped for root, the tests skipped for another
# reason, the output of every failure, and one summary line; the whole
# verbose log is kept in LOG.
#
#   GO    the go command (default: go)
#   QEMU  the emulator (default: qemu-aarch64-static)
#   LOG   the verbose log (default: bin/test-arm64.log)
set -eu

cd "$(dirname "$0")/.."
GO=${GO:-go}
QEMU=${QEMU:-qemu-aarch64-static}
LOG=${LOG:-bin/test-arm64.log}

if ! command -v "$QEMU" >/dev/null; then
	echo "test-arm64: $QEMU not found: run \`make test-deps\` as root (it installs qemu-user-static)" >&2
	exit 1
fi
mkdir -p "$(dirname "$LOG")"
start=$(date +%s)
# vet sees what differs by architecture (struct sizes in unsafe calls,
# atomic alignment, build tags) that `make lint` on amd64 does not.
echo "test-arm64: GOARCH=arm64 go vet ./..."
GOARCH=arm64 $GO vet ./...
status=0
# EDGEHEAL_TEST_EXEC: tests that start a binary of their own build (the
# test binary again, or a `go build` of the daemon, which reads GOARCH
# from this environment) start it through the emulator too
# (internal/testsupport.Command).
GOARCH=arm64 EDGEHEAL_TEST_EXEC=$QEMU $GO test -short -count=1 -v -exec "$QEMU" ./... >"$LOG" 2>&1 || status=$?
secs=$(($(date +%s) - start))

# Counts are of tests that ran no subtests and of subtests: a test made
# of subtests is counted by them. A line of output belongs to the test
# named by the last === line (RUN, CONT, NAME), so parallel subtests keep
# their own messages.
awk -v qemu="$QEMU" -v secs="$secs" -v logf="$LOG" '
function short(p) { sub(/^github\.com\/edgeheal\/edgeheal/, ".", p); return p }
/^=== (RUN|CONT|NAME|PAUSE) / {
	cur = $3
	if ($2 == "RUN" && cur ~ /\//) { parent = cur; sub(/\/[^\/]*$/, "", parent); hasSub[parent] = 1 }
	next
}
{ block = block $0 "\n" }
/^ *--- (PASS|SKIP|FAIL): / {
	name = $3
	leaf = !(name in hasSub)
	if ($2 == "PASS:" && leaf) { pass++; ppass++ }
	if ($2 == "SKIP:") {
		if (msg[name] ~ /needs root/) { root[pkgn] = root[pkgn] " " name; nroot++; proot++ }
		else { m = msg[name]; sub(/^ +/, "", m); other = other "    " name ": " m "\n"; nother++; pother++ }
	}
	if ($2 == "FAIL:") {
		fails = fails "--- FAIL: " name "\n" out[name]
		if (leaf) { nfail++; pfail++ }
	}
	next
}
/^(ok|FAIL|\?)[ \t]+github\.com\// {
	p = short($2); npkg++
	if ($1 == "?") { line = sprintf("%-4s %-36s no test files", "-", p) }
	else {
		ran++
		line = sprintf("%-4s %-36s %8s  passed %d, skipped for root %d, otherwise %d, failed %d", $1, p, $3, ppass, proot, pother, pfail)
		if ($1 == "FAIL" && pfail == 0) { fails = fails block }   # a build failure, a panic, TestMain
	}
	pkgs = pkgs line "\n"
	if (proot > 0) { roots = roots "  " p ":" root[pkgn] "\n" }
	if (pother > 0) { others = others "  " p ":\n" other }
	pkgn++; ppass = proot = pother = pfail = 0; other = ""; block = ""
	split("", msg); split("", out); split("", hasSub)
	next
}
cur != "" { out[cur] = out[cur] $0 "\n" }
cur != "" && /^ +[^ ].*\.go:[0-9]+: / { msg[cur] = $0 }
END {
	printf "== packages, built for arm64 and run under %s (go test -short)\n%s", qemu, pkgs
	printf "== tests skipped for root (namespaces, TUN, systemd, containerd: `sudo make test` runs them natively)\n%s", roots
	if (others != "") printf "== tests skipped for another reason\n%s", others
	if (fails != "") printf "== failures\n%s", fails
	printf "test-arm64: %d packages (%d with tests), %d tests passed, %d skipped for root, %d otherwise, %d failed; %d s; log: %s\n", npkg, ran, pass, nroot, nother, nfail, secs, logf
}' "$LOG"
if [ "$status" -ne 0 ]; then
	echo "test-arm64: go test failed (exit $status)" >&2
fi
exit "$status"
