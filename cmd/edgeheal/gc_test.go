package main

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGCLeavesAnOperatorsGOGCAlone(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	t.Setenv("GOGC", "200")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, tuneGC changed the GC percent to %d", got)
	}
}

func TestTuneGCSetsTheDaemonsTarget(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	t.Setenv("GOGC", "")
	// t.Setenv then unset: LookupEnv must see no GOGC at all.
	if err := unsetenv(t, "GOGC"); err != nil {
		t.Fatal(err)
	}
	tuneGC()
	if got := debug.SetGCPercent(100); got != daemonGCPercent {
		t.Errorf("GC percent %d after tuneGC, want %d", got, daemonGCPercent)
	}
}

// unsetenv removes key for the rest of the test (t.Setenv before it
// restores the old value at the end).
func unsetenv(t *testing.T, key string) error {
	t.Helper()
	return os.Unsetenv(key)
}
