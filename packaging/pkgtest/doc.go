// Package pkgtest holds the tests that build the .deb and .rpm of edgeheal,
// edgeheal-fleet and edgeheal-kube with packaging/build.sh and inspect them
// with the distributions' own tools (dpkg-deb, rpm, lintian, systemd-analyze),
// run their maintainer scripts against fakes, and run the packaged units
// under a real, confined systemd. It has no non-test code: nothing imports
// it.
//
// The tests build the packages once per `go test` run (about a minute on two
// cores once nfpm is built; the first build of the pinned nfpm adds one or
// two). They are skipped with -short.
package pkgtest
