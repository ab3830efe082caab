//go:build profile

package main

// A build of the daemon for measuring where its memory goes, never
// shipped: `go build -tags profile ./cmd/edgeheal`. On SIGUSR1 it
// writes heap.pprof (after a GC), goroutine.txt and a memstats line into
// $EDGEHEAL_PROFILE_DIR. The footprint benchmark uses it with
// -footprint.profile (docs/performance.md, "Where the memory goes").
// Without the tag none of this is linked: runtime/pprof would add its
// encoder and compress/gzip to the edge binary.

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
)

// Every allocation is recorded: the daemon's heap is a few MiB, and the
// default rate (one sample per 512 KiB) would show a handful of them.
var _ = func() int { runtime.MemProfileRate = 1; return 0 }()

func init() {
	dir := os.Getenv("EDGEHEAL_PROFILE_DIR")
	if dir == "" {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for range sig {
			writeProfiles(dir)
		}
	}()
}

func writeProfiles(dir string) {
	runtime.GC()
	if f, err := os.Create(filepath.Join(dir, "heap.pprof")); err == nil {
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	if f, err := os.Create(filepath.Join(dir, "goroutine.txt")); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = os.WriteFile(filepath.Join(dir, "memstats.txt"), fmt.Appendf(nil,
		"HeapInuse %d\nHeapAlloc %d\nHeapIdle %d\nHeapReleased %d\nStackInuse %d\nMSpanInuse %d\nGCSys %d\nOtherSys %d\nSys %d\nNumGoroutine %d\n",
		ms.HeapInuse, ms.HeapAlloc, ms.HeapIdle, ms.HeapReleased, ms.StackInuse, ms.MSpanInuse, ms.GCSys, ms.OtherSys, ms.Sys, runtime.NumGoroutine()), 0o644)
}
