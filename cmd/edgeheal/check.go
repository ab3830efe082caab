package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/offload"
	"github.com/edgeheal/edgeheal/agent/system"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// checkReport is what `edgeheal check --json` prints.
type checkReport struct {
	Node     string          `json:"node"`
	Config   string          `json:"config"`
	Revision string          `json:"config_revision"`
	Healthy  bool            `json:"healthy"`
	Uplinks  *offload.Report `json:"uplinks,omitempty"`
	Checks   []wire.Check    `json:"checks"`
}

func cmdCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", "check [--json] [--config FILE]",
		"Diagnose this node once, without changing anything, and exit 1 if any check is unhealthy.", stderr)
	path := fs.String("config", configs.DefaultPath, "main config file; drop-ins are read from config.d/ next to it")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	sys := system.Open()
	defer sys.Close()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	node, err := agent.CheckNode(ctx, cfg, sys.OS(), log)
	if err != nil {
		return fail(exitCantRun, fmt.Errorf("checking uplinks: %w", err))
	}
	rep := checkReport{Node: cfg.Node.Name, Config: *path, Revision: cfg.Revision, Healthy: node.Healthy,
		Uplinks: node.Uplinks, Checks: node.Checks}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "node %s, config %s (revision %s): valid\n\n", rep.Node, rep.Config, rep.Revision)
		if rep.Uplinks != nil {
			if err := rep.Uplinks.WriteText(stdout); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		writeChecks(stdout, rep.Checks)
	}
	if !rep.Healthy {
		return fail(exitProblem, nil)
	}
	return nil
}

// writeChecks prints checks as an aligned table.
func writeChecks(w io.Writer, checks []wire.Check) {
	if len(checks) == 0 {
		fmt.Fprintln(w, "no uplinks, tunnels or workloads configured to check")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTARGET\tSTATE\tDETAIL")
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Kind, c.Target, c.State, c.Detail)
	}
	tw.Flush()
}
