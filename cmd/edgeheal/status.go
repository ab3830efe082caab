package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "status [--json] [--config FILE | --addr HOST:PORT]",
		"Ask the running agent for its checks, states, last actions and outbox depth.\nExit 1 if any check is unhealthy, 2 if no agent answers.", stderr)
	path := fs.String("config", configs.DefaultPath, "config file whose report.http.listen names the agent's address")
	addr := fs.String("addr", "", "the agent's HTTP address (default: report.http.listen from the config)")
	asJSON := fs.Bool("json", false, "print the agent's status as JSON")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *addr == "" {
		cfg, err := loadConfig(*path)
		if err != nil {
			return err
		}
		*addr = cfg.Report.HTTP.Listen
		if *addr == "" {
			return fail(exitCantRun, fmt.Errorf("report.http.listen is empty in %s: the agent serves no status; pass --addr", *path))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := fetchStatus(ctx, *addr)
	if err != nil {
		return fail(exitCantRun, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else if err := writeStatusTable(stdout, st, time.Now()); err != nil {
		return err
	}
	for _, c := range st.Checks {
		if !c.Healthy {
			return fail(exitProblem, nil)
		}
	}
	return nil
}
