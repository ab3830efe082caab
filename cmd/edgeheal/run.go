package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/system"
	"github.com/edgeheal/edgeheal/agent/tunnel"
	"github.com/edgeheal/edgeheal/configs"
)

// stopWithin bounds a stop (SIGTERM, SIGINT): systemd's TimeoutStopSec
// is longer, but a stop that takes longer than this has a part that hangs.
const stopWithin = 8 * time.Second

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "run [--config FILE] [--state-dir DIR] [--log-format text|json] [--log-level LEVEL]",
		"Run the agent until SIGTERM or SIGINT. SIGHUP reloads the configuration: an invalid\n"+
			"new configuration is refused and the running one kept. An invalid configuration at\n"+
			"start falls back to the last good copy in the state directory, if there is one.", stderr)
	path := fs.String("config", configs.DefaultPath, "main config file; drop-ins are read from config.d/ next to it")
	format := fs.String("log-format", "text", "log format: text or json")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	stateDir := fs.String("state-dir", defaultState, "where the last good config and the policy state (budgets, open incidents) are kept; report.state_dir holds the rest")
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
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("starting", "version", version, "node", cfg.Node.Name, "site", cfg.Node.Site,
		"config_revision", cfg.Revision, "files", cfg.Files, "dry_run", cfg.DryRun)

	sys := system.Open()
	defer sys.Close()
	rep := newReporting(cfg, log, sys.OS().Links)
	// The policy state lives beside the last good config: a config change
	// must not move (and so reset) the bounds on disruptive actions.
	ledger, _ := tunnel.OpenLedger(*stateDir, time.Now(), log) // an unreadable file is logged, moved aside, and starts empty
	a := agent.New(cfg, agent.Options{OS: sys.OS(), Log: log, Emit: rep.recorder.Emit,
		OnRound: rep.onRound, OnProbe: rep.metrics.ObserveProbe, Ledger: ledger})
	rep.wire(a)
	rep.metrics.ConfigLoaded(true, time.Now())

	return serve(ctx, stop, hup, log, a, rep, ledger, *path, *stateDir)
}

// serve runs the agent until a signal stops it: READY=1 and the watchdog,
// SIGHUP reloads, and a stop that ends within stopWithin whatever part
// hangs.
func serve(ctx context.Context, stop context.CancelFunc, hup <-chan os.Signal, log *slog.Logger, a *agent.Agent,
	rep *reporting, ledger *tunnel.Ledger, path, stateDir string) error {
	var bg sync.WaitGroup
	bg.Go(func() { rep.notifier.RunWatchdog(ctx, a.LastProgress) })
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	rl := &reloader{ctx: ctx, log: log, a: a, rep: rep, path: path, stateDir: stateDir}
	if err := rep.notifier.Ready(); err != nil {
		log.Warn("could not notify systemd", "error", err)
	}
	finish := func(err error) error {
		_ = rep.notifier.Stopping()
		stop()
		bg.Wait()
		ledger.Flush(time.Second)
		closed := make(chan struct{})
		go func() { rep.close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(2 * time.Second): // a disk that gives no answer; what the outbox holds is on disk already
			log.Error("stopping: the outbox did not close within 2s; exiting")
		}
		if err != nil {
			return fail(exitCantRun, err)
		}
		log.Info("stopped")
		return nil
	}
	for {
		select {
		case err := <-done:
			return finish(err)
		case <-ctx.Done():
			// Stopping: every component ends its Run within a second or
			// two (each call that can hang has a deadline). Should one not,
			// the process still ends: a healer that cannot be stopped is
			// one systemd kills, and then nothing is flushed at all.
			_ = rep.notifier.Stopping()
			select {
			case err := <-done:
				return finish(err)
			case <-time.After(stopWithin):
				log.Error("stopping: parts that did not end within "+stopWithin.String()+"; exiting without them", "components", a.Unfinished())
				ledger.Flush(500 * time.Millisecond)
				return nil
			}
		case <-hup:
			rl.start()
		case ok := <-rl.result:
			rl.finished(ok)
		}
	}
}

// reloader runs a SIGHUP's reload beside the signal loop, so that nothing
// a reload waits on can keep a SIGTERM from stopping the agent; a SIGHUP
// during a reload runs one more reload after it.
type reloader struct {
	ctx            context.Context
	log            *slog.Logger
	a              *agent.Agent
	rep            *reporting
	path, stateDir string
	result         chan bool // nil while no reload runs
	again          bool
}

func (r *reloader) start() {
	if r.result != nil {
		r.again = true
		return
	}
	_ = r.rep.notifier.Reloading()
	ch := make(chan bool, 1)
	r.result = ch
	go func() { ch <- reload(r.ctx, r.log, r.a, r.path, r.stateDir) }()
}

func (r *reloader) finished(ok bool) {
	r.result = nil
	r.rep.metrics.ConfigLoaded(ok, time.Now())
	if ok && r.rep.publisher != nil {
		r.rep.publisher.SetConfigRevision(r.a.Config().Revision)
	}
	_ = r.rep.notifier.Ready()
	if r.again {
		r.again = false
		r.start()
	}
}

// reload loads the config again and hands it to the agent; on any problem
// the running config stays and the reason is logged.
func reload(ctx context.Context, log *slog.Logger, a *agent.Agent, path, stateDir string) bool {
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
	keepLastGood(log, cfg, stateDir)
	if !reflect.DeepEqual(old.Report, cfg.Report) || old.Node != cfg.Node {
		log.Warn("report and node settings changed: they apply at the next restart (systemctl restart edgeheal)")
	}
	log.Info("reloaded", "config_revision", cfg.Revision, "files", cfg.Files)
	return true
}

// startConfig loads the config, or the last good copy (agent.StartConfig),
// and maps a config that cannot be used at all to an exit code.
func startConfig(log *slog.Logger, path, stateDir string) (*configs.Config, error) {
	cfg, invalid, err := agent.StartConfig(path, stateDir)
	if err != nil {
		code := exitProblem
		if errors.Is(err, configs.ErrRead) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			code = exitCantRun
		}
		return nil, fail(code, err)
	}
	if invalid != nil {
		log.Error("config invalid: running with the last good copy", "config", path, "state_dir", stateDir,
			"config_revision", cfg.Revision, "error", invalid)
		return cfg, nil
	}
	keepLastGood(log, cfg, stateDir)
	return cfg, nil
}

func keepLastGood(log *slog.Logger, cfg *configs.Config, stateDir string) {
	if err := agent.KeepLastGood(cfg, stateDir); err != nil {
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
		return slog.New(redacting(logHandler(w, lv, "edgeheal"))), nil
	case "json":
		return slog.New(redacting(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv}))), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
