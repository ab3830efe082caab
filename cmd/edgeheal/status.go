package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/configs"
)

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "status [--json] [--config FILE | --addr HOST:PORT]",
		"Ask the running agent for its checks, states, last actions and outbox depth.", stderr)
	path := fs.String("config", configs.DefaultPath, "config file whose report.http.listen names the agent's address")
	addr := fs.String("addr", "", "the agent's HTTP address (default: report.http.listen from the config)")
	asJSON := fs.Bool("json", false, "print the agent's JSON as it is")
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
	url := "http://" + *addr + "/v1/status"
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return fail(exitCantRun, fmt.Errorf("no agent answered at %s: is edgeheal running? (systemctl status edgeheal): %v", *addr, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return fail(exitCantRun, fmt.Errorf("agent at %s answered %s: %v", *addr, resp.Status, err))
	}
	if *asJSON {
		_, err = stdout.Write(body)
		return err
	}
	var st struct {
		Checks []agent.Check `json:"checks"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fail(exitCantRun, fmt.Errorf("agent at %s sent a status this CLI cannot read: %v", *addr, err))
	}
	writeChecks(stdout, st.Checks)
	for _, c := range st.Checks {
		if !c.Healthy {
			return fail(exitProblem, nil)
		}
	}
	return nil
}
