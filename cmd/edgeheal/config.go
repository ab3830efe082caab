package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/offload"
	"github.com/edgeheal/edgeheal/agent/system"
	"github.com/edgeheal/edgeheal/configs"
)

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, "Usage: edgeheal config check|show [flags]\n\n"+
			"  check   validate the merged configuration; exit 0 valid, 1 invalid\n"+
			"  show    print the merged configuration (--origin: each value's file:line)\n")
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "check":
		return cmdConfigCheck(args[1:], stdout, stderr)
	case "show":
		return cmdConfigShow(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "edgeheal config: unknown subcommand %q (check or show)\n", args[0])
	return errUsage
}

func cmdConfigCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("config check", "config check [--config FILE]",
		"Validate the defaults, FILE and its config.d/*.yaml merged, and list every problem\nwith its file and key path. Exit 0 valid, 1 invalid, 2 could not read.", stderr)
	path := fs.String("config", configs.DefaultPath, "main config file; drop-ins are read from config.d/ next to it")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: valid (%d files, revision %s)\n", *path, len(cfg.Files), cfg.Revision)
	if len(cfg.Uplinks) > 0 {
		sys := system.Open()
		defer sys.Close()
		writeUplinkMatches(stdout, cfg.Uplinks, sys.OS().Links)
	}
	return nil
}

// writeUplinkMatches shows what each uplink selector chooses on this node,
// and what a pattern passes over (the loopback, veths, bridges, tunnels),
// so that a pattern is seen to do what was meant before the agent acts on
// it. Links that cannot be listed are said, not an error: the config is
// valid either way.
func writeUplinkMatches(w io.Writer, ups []configs.Uplink, links core.Links) {
	ms, err := offload.Match(links, ups)
	if err != nil {
		fmt.Fprintf(w, "uplinks on this node: the links could not be listed: %v\n", err)
		return
	}
	fmt.Fprintln(w, "uplinks on this node:")
	for i, m := range ms {
		chosen := strings.Join(m.Links, ", ")
		if chosen == "" {
			chosen = "no link"
		}
		fmt.Fprintf(w, "  uplinks[%d] %q: %s", i, m.Selector, chosen)
		if len(m.Skipped) > 0 {
			fmt.Fprintf(w, " (a pattern never chooses %s: name one exactly to guard it)", strings.Join(m.Skipped, ", "))
		}
		fmt.Fprintln(w)
	}
}

func cmdConfigShow(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("config show", "config show [--origin] [--config FILE]",
		"Print the merged configuration as YAML.", stderr)
	path := fs.String("config", configs.DefaultPath, "main config file; drop-ins are read from config.d/ next to it")
	origin := fs.Bool("origin", false, "annotate every value with the file:line it came from")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	out, err := cfg.Marshal(*origin)
	if err != nil {
		return fail(exitCantRun, err)
	}
	_, err = stdout.Write(out)
	return err
}

// loadConfig loads path and maps the error to the exit code: 1 for an
// invalid config (every problem on its own line), 2 for one that could not
// be read (missing, unreadable, not a regular file, too large).
func loadConfig(path string) (*configs.Config, error) {
	cfg, err := configs.Load(path)
	if err == nil {
		return cfg, nil
	}
	if errors.Is(err, configs.ErrRead) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
		return nil, fail(exitCantRun, err)
	}
	return nil, fail(exitProblem, fmt.Errorf("invalid configuration:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  ")))
}
