package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStartConfigFallsBackToTheLastGoodCopyInTheStateDirectory(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// report.state_dir points elsewhere: the last good copy still lives in
	// the state directory StartConfig is given.
	write("version: 1\nnode: {name: gw-good}\nreport: {state_dir: /var/lib/elsewhere}\n")
	cfg, invalid, err := StartConfig(path, state)
	if err != nil || invalid != nil || cfg.Node.Name != "gw-good" {
		t.Fatalf("a valid config: %v, %v, %v", cfg, invalid, err)
	}
	if err := KeepLastGood(cfg, state); err != nil {
		t.Fatal(err)
	}
	write("version: 1\nnode: {name: gw-bad}\ninterval: never\n")
	cfg, invalid, err = StartConfig(path, state)
	if err != nil || cfg.Node.Name != "gw-good" || invalid == nil || !strings.Contains(invalid.Error(), "never") {
		t.Errorf("an invalid config: %v, invalid %v, err %v; want the last good copy and why", cfg, invalid, err)
	}
	if _, _, err := StartConfig(path, filepath.Join(dir, "empty")); !errors.Is(err, ErrNoLastGood) {
		t.Errorf("without a copy: %v, want ErrNoLastGood", err)
	}
}
