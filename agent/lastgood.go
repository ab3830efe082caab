package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeheal/edgeheal/agent/statedir"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/regfile"
)

// LastGoodName is the file in the agent's state directory (run
// --state-dir, /var/lib/edgeheal) that keeps the last config that loaded
// and validated. It is written and read in that one directory: at a start
// with an invalid config, report.state_dir is not known, so it cannot be
// where the copy lives.
const LastGoodName = "last-good-config.yaml"

// ErrNoLastGood matches the error of StartConfig when the config is
// unusable and there is no last good copy either.
var ErrNoLastGood = errors.New("no last good copy")

// StartConfig loads the config at path for a start of the daemon and keeps
// a copy of it in stateDir. If it cannot be loaded (invalid, unreadable,
// missing), the last good copy from stateDir is used instead, so that a bad
// fleet push never takes a node's healer down; invalid is then why. Only
// with no good copy at all is it an error, which joins the config's own
// error and ErrNoLastGood.
func StartConfig(path, stateDir string) (cfg *configs.Config, invalid, err error) {
	cfg, err = configs.Load(path)
	if err == nil {
		return cfg, nil, nil
	}
	lg := filepath.Join(stateDir, LastGoodName)
	good, lgErr := configs.LoadLastGood(lg)
	if lgErr != nil {
		if errors.Is(lgErr, os.ErrNotExist) {
			lgErr = ErrNoLastGood
		}
		return nil, nil, fmt.Errorf("cannot start: %w\n(fallback %s: %w)", err, lg, lgErr)
	}
	return good, err, nil
}

// KeepLastGood writes cfg, merged, to stateDir as the last good copy,
// atomically and durably.
func KeepLastGood(cfg *configs.Config, stateDir string) error {
	out, err := cfg.Marshal(false)
	if err != nil {
		return fmt.Errorf("keeping the last good config: %w", err)
	}
	if len(out) > regfile.ConfigLimit {
		return fmt.Errorf("keeping the last good config: %d bytes merged, more than the %d a config may hold", len(out), regfile.ConfigLimit)
	}
	if err := statedir.WriteFile(filepath.Join(stateDir, LastGoodName), out, 0o640); err != nil {
		return fmt.Errorf("keeping the last good config: %w", err)
	}
	return nil
}
