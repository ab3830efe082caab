// Command edgeheal-fleet is the cloud side of edgeheal: it reads every
// node's retained status and events from the MQTT broker and serves the
// fleet as a web page and Prometheus metrics, and it renders the fleet's
// templates into one config file per node. Flags, wiring and signals
// only: the fleet's state is package fleet's, the broker connection
// fleet/source's, the page and metrics fleet/web's, rendering
// fleet/render's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/fleet/web"
)

// version is set at build time (-X main.version=...).
var version = "dev"

const usage = `usage: edgeheal-fleet <command> [flags]

  run [--config FILE] [--listen ADDR]   read the fleet from the broker; serve the console, the API and /metrics
  config check [--config FILE]          validate the configuration and the users file; exit 0 valid, 1 invalid
  user password NAME                    a users-file line for NAME, the password read from standard input
  user token NAME                       a new bearer token for NAME (printed once) and its users-file line
  render --templates DIR --inventory FILE --out DIR
                                        render fleet templates into one validated config per node
  version

Exit codes: 0 ok, 1 invalid configuration (render: a node failed), 2 usage error or could not run.
Run 'edgeheal-fleet render --help' for render's flags.
`

func main() {
	// The view's heap is mostly long-lived state, a bounded amount per
	// node; what each message allocates is short-lived. Collecting when
	// the heap has grown by half (not doubled) keeps the view's memory
	// near its state for little CPU (docs/performance.md, "The fleet view
	// at 10,000 and 100,000 nodes"). GOGC in the environment overrides it.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch {
	case args[0] == "version":
		fmt.Fprintf(stdout, "edgeheal-fleet %s\n", version)
		return 0
	case args[0] == "run":
		return cmdRun(args[1:], stderr)
	case args[0] == "config" && len(args) > 1 && args[1] == "check":
		return cmdCheck(args[2:], stdout, stderr)
	case args[0] == "user":
		return cmdUser(args[1:], os.Stdin, stdout, stderr)
	case args[0] == "render":
		return cmdRender(args[1:], stdout, stderr)
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "edgeheal-fleet: unknown command %q\n%s", args[0], usage)
	return 2
}

func flags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, fs.String("config", fleet.DefaultConfigPath, "the configuration file")
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs, path := flags("config check", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c, err := fleet.LoadConfig(*path)
	if err != nil {
		return configFailed(stderr, err)
	}
	broker := c.MQTT.Broker
	if broker == "" {
		broker = "none configured"
	}
	users := "authentication off"
	if !c.Web.Auth.Disabled {
		u, err := web.LoadUsers(c.Web.Auth.UsersFile)
		if err != nil {
			return configFailed(stderr, err)
		}
		users = fmt.Sprintf("%d users in %s", u.Len(), c.Web.Auth.UsersFile)
	}
	fmt.Fprintf(stdout, "%s: valid (broker %s, listen %s, %s)\n", *path, broker, c.Listen, users)
	return 0
}

func cmdRun(args []string, stderr io.Writer) int {
	fs, path := flags("run", stderr)
	listen := fs.String("listen", "", "address of the page and /metrics (default: the configuration's listen)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	c, err := fleet.LoadConfig(*path)
	if err != nil {
		return configFailed(stderr, err)
	}
	if *listen != "" {
		c.Listen = *listen
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, c, *path, log); err != nil {
		log.Error("edgeheal-fleet stopped", "err", err)
		return 2
	}
	return 0
}

// configFailed reports a configuration that could not be used: exit 2 when
// the file could not be read, 1 when it is invalid.
func configFailed(stderr io.Writer, err error) int {
	if unreadable(err) {
		fmt.Fprintf(stderr, "edgeheal-fleet: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "edgeheal-fleet: invalid configuration:\n  %s\n", indent(err))
	return 1
}

// unreadable reports whether err means a file could not be read at all,
// as opposed to being invalid.
func unreadable(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)
}

func indent(err error) string {
	out := err.Error()
	for i := 0; i < len(out); i++ {
		if out[i] == '\n' {
			out = out[:i+1] + "  " + out[i+1:]
		}
	}
	return out
}
