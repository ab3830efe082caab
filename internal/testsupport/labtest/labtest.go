// Package labtest starts the edgeheal lab (package lab) for a test and
// removes it when the test ends, also when it fails.
package labtest

import (
	"context"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/lab"
)

// New starts a lab and closes it in t.Cleanup. With -short or without root
// it skips, saying the command that runs the test.
func New(t testing.TB, opts lab.Options) *lab.Lab {
	t.Helper()
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	l, err := lab.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting lab: %v", err)
	}
	t.Logf("lab %s up in %v", l.Prefix(), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("closing lab %s: %v", l.Prefix(), err)
		}
	})
	return l
}
