package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/configs"
)

// checkReport is what `edgeheal check --json` prints.
type checkReport struct {
	Node     string              `json:"node"`
	Config   string              `json:"config"`
	Revision string              `json:"config_revision"`
	Healthy  bool                `json:"healthy"`
	Uplinks  *agent.UplinkReport `json:"uplinks,omitempty"`
	Checks   []agent.Check       `json:"checks"`
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
	rep := checkReport{Node: cfg.Node.Name, Config: *path, Revision: cfg.Revision, Healthy: true, Checks: []agent.Check{}}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	h := openHandles()
	defer h.close()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if len(cfg.Uplinks) > 0 {
		if err := errors.Join(h.need("ethtool"), h.need("netlink")); err != nil {
			return fail(exitCantRun, fmt.Errorf("checking uplinks: %w", err))
		}
		up, err := agent.CheckUplinks(ctx, cfg.Uplinks, h.links, h.nicRead)
		if err != nil {
			return fail(exitCantRun, fmt.Errorf("checking uplinks: %w", err))
		}
		rep.Uplinks = &up
		rep.Checks = append(rep.Checks, up.Checks()...)
	}
	if len(cfg.Tunnels) > 0 {
		if err := h.need("wireguard"); err != nil {
			return fail(exitCantRun, fmt.Errorf("checking tunnels: %w", err))
		}
		sys := &agent.TunnelSystem{WG: h.wg, Uplinks: h.links, ClockProbe: h.clock}
		tm := agent.NewTunnelMonitor(cfg.Tunnels, cfg.Policy, true, sys, log, nil)
		rep.Checks = append(rep.Checks, tm.Check(ctx)...)
	}
	if len(cfg.Workloads) > 0 {
		wm := agent.NewWorkloadMonitor(cfg.Workloads, agent.ProbesWorkloadProber{Locator: h.locator}, nil, nil, log)
		rep.Checks = append(rep.Checks, wm.Check(ctx)...)
	}
	for _, c := range rep.Checks {
		if !c.Healthy {
			rep.Healthy = false
		}
	}
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
func writeChecks(w io.Writer, checks []agent.Check) {
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
