package configs

import (
	"fmt"
	"os"
	"path/filepath"
)

// LastGoodName is the file in the state directory that keeps the last
// config that loaded and validated.
const LastGoodName = "last-good-config.yaml"

// SaveLastGood writes c, merged, to its state directory, atomically. The
// agent falls back to it when the config on disk is invalid at start.
func SaveLastGood(c *Config) error {
	out, err := c.Marshal(false)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Report.StateDir, 0o750); err != nil {
		return fmt.Errorf("saving last good config: %w", err)
	}
	path := filepath.Join(c.Report.StateDir, LastGoodName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("saving last good config: %w", err)
	}
	if _, err := f.Write(out); err != nil {
		f.Close()
		return fmt.Errorf("saving last good config: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("saving last good config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("saving last good config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("saving last good config: %w", err)
	}
	return nil
}

// LoadLastGood reads a copy written by SaveLastGood. Its values come from
// one file, so origins point there.
func LoadLastGood(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}
