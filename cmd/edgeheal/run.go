package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/configs"
)

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "run [--config FILE] [--log-format text|json] [--log-level LEVEL]",
		"Run the agent until SIGTERM or SIGINT. SIGHUP reloads the configuration: an invalid\n"+
			"new configuration is refused and the running one kept. An invalid configuration at\n"+
			"start falls back to the last good copy in the state directory, if there is one.", stderr)
	path := fs.String("config", configs.DefaultPath, "main config file; drop-ins are read from config.d/ next to it")
	format := fs.String("log-format", "text", "log format: text or json")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	stateDir := fs.String("state-dir", defaultState, "where the last good config is kept when the config itself cannot be read")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	log, err := newLogger(stderr, *format, *level)
	if err != nil {
		fmt.Fprintln(stderr, "edgeheal run:", err)
		return errUsage
	}
	cfg, err := startConfig(log, *path, *stateDir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("starting", "version", version, "node", cfg.Node.Name, "site", cfg.Node.Site,
		"config_revision", cfg.Revision, "files", cfg.Files, "dry_run", cfg.DryRun)

	w, err := wire(cfg, log)
	if err != nil {
		return fail(exitCantRun, err)
	}
	a := agent.New(cfg, w.build, log)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for {
		select {
		case err := <-done:
			w.close()
			if err != nil {
				return fail(exitCantRun, err)
			}
			log.Info("stopped")
			return nil
		case <-hup:
			reload(ctx, log, a, *path)
		}
	}
}

// reload loads the config again and hands it to the agent; on any problem
// the running config stays and the reason is logged.
func reload(ctx context.Context, log *slog.Logger, a *agent.Agent, path string) {
	cfg, err := configs.Load(path)
	if err != nil {
		log.Error("reload refused: keeping the running config", "config", path, "running_revision", a.Config().Revision, "error", err)
		return
	}
	if err := a.Reload(ctx, cfg); err != nil {
		log.Error("reload refused: keeping the running config", "config", path, "error", err)
		return
	}
	saveLastGood(log, cfg)
	log.Info("reloaded", "config_revision", cfg.Revision, "files", cfg.Files)
}

// startConfig loads the config; if it is invalid or unreadable, it falls
// back to the last good copy so that a bad fleet push cannot take a node's
// healer down.
func startConfig(log *slog.Logger, path, stateDir string) (*configs.Config, error) {
	cfg, err := configs.Load(path)
	if err == nil {
		saveLastGood(log, cfg)
		return cfg, nil
	}
	lg := filepath.Join(stateDir, configs.LastGoodName)
	good, lgErr := configs.LoadLastGood(lg)
	if lgErr != nil {
		if errors.Is(lgErr, os.ErrNotExist) {
			lgErr = errors.New("no last good copy")
		}
		code := exitProblem
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			code = exitCantRun
		}
		return nil, fail(code, fmt.Errorf("cannot start: %w\n(fallback %s: %v)", err, lg, lgErr))
	}
	log.Error("config invalid: running with the last good copy", "config", path, "last_good", lg,
		"config_revision", good.Revision, "error", err)
	return good, nil
}

func saveLastGood(log *slog.Logger, cfg *configs.Config) {
	if err := configs.SaveLastGood(cfg); err != nil {
		log.Warn("could not keep a last good copy of the config", "error", err)
	}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if os.Getenv("JOURNAL_STREAM") != "" {
		// journald stamps every line itself.
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
