package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "status [--json] [--config FILE | --socket PATH]",
		"Ask the running agent, over its local socket, for its checks, states, last actions and\n"+
			"outbox depth. Only an agent run by root is believed. Exit 1 if any check is unhealthy,\n"+
			"2 if no agent answers.", stderr)
	path := fs.String("config", configs.DefaultPath, "config file whose report.http.socket names the agent's socket")
	socket := fs.String("socket", "", "the agent's local API socket (default: report.http.socket from the config)")
	asJSON := fs.Bool("json", false, "print the agent's status as JSON")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *socket == "" {
		cfg, err := loadConfig(*path)
		if err != nil {
			return err
		}
		*socket = cfg.Report.HTTP.Socket
		if *socket == "" {
			return fail(exitCantRun, fmt.Errorf("report.http.socket is empty in %s: the agent serves no local API; pass --socket", *path))
		}
	}
	st, err := fetchStatus(context.Background(), *socket)
	if err != nil {
		return fail(exitCantRun, err)
	}
	if *asJSON {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
		if _, err := stdout.Write(safeJSON(b.Bytes())); err != nil {
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
