package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/configs"
)

// checkReport is what `edgeheal check --json` prints.
type checkReport struct {
	Node     string        `json:"node"`
	Config   string        `json:"config"`
	Revision string        `json:"config_revision"`
	Healthy  bool          `json:"healthy"`
	Checks   []agent.Check `json:"checks"`
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
		fmt.Fprintf(stdout, "node %s, config %s (revision %s): valid\n", rep.Node, rep.Config, rep.Revision)
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
	fmt.Fprintf(w, "%-9s %-28s %-10s %s\n", "KIND", "TARGET", "STATE", "DETAIL")
	for _, c := range checks {
		fmt.Fprintf(w, "%-9s %-28s %-10s %s\n", c.Kind, c.Target, c.State, c.Detail)
	}
}
