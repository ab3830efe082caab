# edgeheal: make build | test | lint | fuzz | demo | bench | package
# The lab, the demo and the root tests need root (network namespaces).
# Go 1.26 from /usr/local/go, where the machines install it.
export PATH := /usr/local/go/bin:$(PATH)
GO          ?= go
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X main.version=$(VERSION)
# The daemon is compiled without inlining outside the runtime: 0.84 MB
# smaller, 0.7 MiB less goroutine stack, a 5,000-peer round 35 % slower
# (docs/performance.md, "Inlining"). packaging/build.sh says the same.
DAEMON_GCFLAGS := -gcflags=all=-l -gcflags=runtime= -gcflags=internal/runtime/...=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 15s
BIN         := bin

.PHONY: build kube-apiserver test test-deps test-short test-arm64 lint fuzz bench bench-fleet bench-lab bench-lab-short footprint demo package clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath $(DAEMON_GCFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/edgeheal ./cmd/edgeheal
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/edgeheal-lab ./cmd/edgeheal-lab
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/edgeheal-fleet ./cmd/edgeheal-fleet
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/edgeheal-kube ./cmd/edgeheal-kube

# Every test, the root lab tests included (they skip, saying so, without
# root), after installing the Debian packages they use (idempotent), and
# after building the binaries the tests of built artefacts run.
# -p 1: the lab tests share the machine's two cores and its /var/run/wireguard.
test: test-deps build kube-apiserver
	$(GO) test -p 1 -count=1 -timeout 60m ./...

# The real kube-apiserver of the Kubernetes lab test, built from the Go
# module proxy and cached by version in /var/cache/edgeheal-lab (about 5
# minutes cold on two cores, nothing when cached; docs/lab.md).
kube-apiserver:
	sh scripts/build-kube-apiserver.sh

# The Debian packages the tests use (scripts/test-deps.sh says which and why).
test-deps:
	sh scripts/test-deps.sh

# Unit tests only: no root, no lab.
test-short:
	$(GO) test -short -count=1 ./...

# The -short tests built for arm64 and run under qemu-aarch64-static
# (scripts/test-arm64.sh: it lists the packages run and the tests skipped
# for root); on 2 cores about 90 s with a warm build cache, 4.5 minutes cold.
test-arm64: test-deps
	GO=$(GO) sh scripts/test-arm64.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Each Fuzz target briefly; FUZZTIME=5m for a longer run.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# The demo (root): the lab with the real fault, the daemon healing it, a
# live timeline; under 2 minutes, removes everything it made.
demo: build
	$(BIN)/edgeheal-lab demo --edgeheal $(BIN)/edgeheal

# Go micro-benchmarks of the hot paths.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The fleet view at 10,000 and at 100,000 nodes with full histories,
# through a real mosquitto on loopback (no root, about 2 and 10 minutes);
# results in bench/results/fleet-scale-<nodes>.{md,json}.
bench-fleet: build
	$(GO) test -run '^$$' -bench FleetScale -benchtime 1x -timeout 30m ./fleet/scalebench/ -args -nodes 10000 -results $(CURDIR)/bench/results
	$(GO) test -run '^$$' -bench FleetScale -benchtime 1x -timeout 60m ./fleet/scalebench/ -args -nodes 100000 -results $(CURDIR)/bench/results

# Scenarios x contenders in the lab (root), side by side; results in
# bench/results/. About 25 minutes; bench-lab-short about 12. The
# contenders need Debian's wireguard-tools (test-deps installs it).
bench-lab: test-deps build
	$(BIN)/edgeheal-lab bench --parallel --edgeheal $(BIN)/edgeheal

bench-lab-short: test-deps build
	$(BIN)/edgeheal-lab bench --parallel --short --edgeheal $(BIN)/edgeheal

# edgeheal (a leaf and a 5,000-peer hub) and Debian's node_exporter side
# by side in the lab's namespaces (root, about 2 minutes): RSS, peak, CPU,
# size, goroutines and the ratios; results in bench/results/footprint-*.
footprint: build
	$(GO) test -run '^$$' -bench LabFootprint -benchtime 1x -timeout 15m ./lab/footprint/ -args -footprint.edgeheal $(CURDIR)/$(BIN)/edgeheal -footprint.results $(CURDIR)/bench/results

# The agent's four packages, the fleet view's four and the Kubernetes
# reporter's four (deb and rpm, amd64 and arm64) into dist/, with nfpm
# pinned in packaging/build.sh.
package:
	sh packaging/build.sh

clean:
	rm -rf $(BIN) dist
