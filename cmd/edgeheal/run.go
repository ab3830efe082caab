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
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/httpapi"
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

	h := openHandles()
	defer h.close()
	for name, err := range h.errs {
		log.Warn("a handle could not be opened; what needs it will not run", "handle", name, "error", err)
	}
	rep, err := openReporting(cfg, h, log)
	if err != nil {
		return fail(exitCantRun, err)
	}
	defer rep.outbox.Close()

	state := &agentState{}
	build := func(c *configs.Config) ([]agent.Part, error) {
		comps, err := h.components(c, log, rep.recorder.Emit)
		if err != nil {
			return nil, err
		}
		var ready func(string) (bool, string, bool)
		for _, comp := range comps {
			if wm, ok := comp.(*agent.WorkloadMonitor); ok {
				ready = wm.Ready
			}
		}
		state.setWorkloads(ready)
		rep.evidenceFor(c, h, state.Checks)
		return comps, nil
	}
	a := agent.New(cfg, build, log)
	state.Agent = a
	a.OnRound = func(checks []agent.Check) {
		rep.metrics.SetChecks(checks)
		mqttOn := rep.publisher != nil
		if mqttOn {
			rep.publisher.SetChecks(checks)
		}
		_ = rep.notifier.Status(statusLine(checks, rep.outbox.Depth(), mqttOn && rep.publisher.Connected(), mqttOn))
	}
	rep.metrics.ConfigLoaded(true, time.Now())

	if cfg.Report.HTTP.Listen != "" {
		sopts := httpapi.ServerOptions{
			Listen:  cfg.Report.HTTP.Listen,
			State:   state,
			Metrics: rep.metrics.Handler(),
			Outbox:  rep.outbox,
			Info: func() httpapi.NodeInfo {
				c := a.Config()
				return httpapi.NodeInfo{Node: c.Node.Name, Site: c.Node.Site, Version: version, ConfigRevision: c.Revision}
			},
			Logger: log.With("component", "http"),
			Stale:  max(3*cfg.Interval.D(), 30*time.Second),
		}
		if rep.publisher != nil {
			sopts.MQTT = rep.publisher.Info
		}
		rep.server = httpapi.NewServer(sopts)
		// A taken port must not keep a network healer down: run without HTTP
		// and say so loudly.
		if err := rep.server.Listen(); err != nil {
			log.Error("running without the HTTP endpoints", "error", err)
			rep.server = nil
		}
	}
	var bg sync.WaitGroup
	if rep.server != nil {
		bg.Go(func() { _ = rep.server.Serve(ctx) })
	}
	if rep.publisher != nil {
		bg.Go(func() {
			if err := rep.publisher.Run(ctx); err != nil {
				log.Error("mqtt reporting stopped", "error", err)
			}
		})
	}

	bg.Add(1)
	go func() {
		defer bg.Done()
		rep.notifier.RunWatchdog(ctx, a.LastProgress)
	}()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	if err := rep.notifier.Ready(); err != nil {
		log.Warn("could not notify systemd", "error", err)
	}
	for {
		select {
		case err := <-done:
			_ = rep.notifier.Stopping()
			stop()
			bg.Wait()
			if err != nil {
				return fail(exitCantRun, err)
			}
			log.Info("stopped")
			return nil
		case <-hup:
			_ = rep.notifier.Reloading()
			ok := reload(ctx, log, a, *path)
			rep.metrics.ConfigLoaded(ok, time.Now())
			if ok && rep.publisher != nil {
				rep.publisher.SetConfigRevision(a.Config().Revision)
			}
			_ = rep.notifier.Ready()
		}
	}
}

// reload loads the config again and hands it to the agent; on any problem
// the running config stays and the reason is logged.
func reload(ctx context.Context, log *slog.Logger, a *agent.Agent, path string) bool {
	cfg, err := configs.Load(path)
	if err != nil {
		log.Error("reload refused: keeping the running config", "config", path, "running_revision", a.Config().Revision, "error", err)
		return false
	}
	old := a.Config()
	if err := a.Reload(ctx, cfg); err != nil {
		log.Error("reload refused: keeping the running config", "config", path, "error", err)
		return false
	}
	saveLastGood(log, cfg)
	if !reflect.DeepEqual(old.Report, cfg.Report) || old.Node != cfg.Node {
		log.Warn("report and node settings changed: they apply at the next restart (systemctl restart edgeheal)")
	}
	log.Info("reloaded", "config_revision", cfg.Revision, "files", cfg.Files)
	return true
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
	switch format {
	case "text":
		// Structured journal entries when stderr is the journal, text otherwise.
		return slog.New(logHandler(w, lv, "edgeheal")), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
