// Command edgeheal is the edge-node network self-healing agent and its CLI.
//
// This package holds flags, wiring, signals and sd_notify only: every
// decision is made in agent, every observation in probes, every change in
// netfix, and every config rule in configs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes, the same for every subcommand.
const (
	exitOK       = 0 // done, healthy, valid
	exitProblem  = 1 // unhealthy or invalid
	exitCantRun  = 2 // usage error, or could not run at all
	defaultState = "/var/lib/edgeheal"
)

// errUsage marks an error as a usage error (exit 2) that was already explained.
var errUsage = errors.New("usage")

// exitError carries an exit code through to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// fail returns an error that makes main exit with code after printing err.
func fail(code int, err error) error { return &exitError{code: code, err: err} }

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the agent (the systemd service runs this)", cmdRun},
		{"config", "check or show the merged configuration", cmdConfig},
		{"check", "one-shot diagnosis of this node; exit 1 if anything is unhealthy", cmdCheck},
		{"status", "ask the running agent for its checks, states and last actions", cmdStatus},
		{"history", "the node's availability, incidents and repairs per day, as the node kept them", cmdHistory},
		{"cleanup", "undo what edgeheal changed that outlives it (path-MTU clamp tables, a lowered tunnel MTU)", cmdCleanup},
		{"version", "print the version", cmdVersion},
	}
}

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitCantRun
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return exitCode(c.run(args[1:], stdout, stderr), stderr)
		}
	}
	if where, ok := moved[args[0]]; ok {
		fmt.Fprintf(stderr, "edgeheal: %s\n", where)
		return exitCantRun
	}
	fmt.Fprintf(stderr, "edgeheal: unknown command %q; run 'edgeheal --help' for the list\n", args[0])
	return exitCantRun
}

// moved are the commands that left the daemon, each with the one line that
// says where to find it now.
var moved = map[string]string{
	"render": "render has moved to the fleet side: run 'edgeheal-fleet render' (package edgeheal-fleet) with the same flags",
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if errors.Is(err, errUsage) {
		return exitCantRun
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && !errors.Is(ee.err, errUsage) && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "edgeheal:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "edgeheal:", err)
	return exitCantRun
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "edgeheal %s: keeps an edge node's overlay network alive.\n\nUsage: edgeheal COMMAND [flags]\n\nCommands:\n", version)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'edgeheal COMMAND --help' for a command's flags.\n"+
		"Exit codes: 0 ok, 1 unhealthy or invalid, 2 usage error or could not run.\n")
}

// newFlags returns a flag set whose --help prints the summary and flags.
func newFlags(name, synopsis, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: edgeheal %s\n\n%s\n", synopsis, summary)
		var any bool
		fs.VisitAll(func(*flag.Flag) { any = true })
		if any {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args and refuses stray positional arguments.
func parse(fs *flag.FlagSet, args []string, maxPositional int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > maxPositional {
		fmt.Fprintf(fs.Output(), "edgeheal %s: unexpected argument %q\n", fs.Name(), strings.Join(fs.Args()[maxPositional:], " "))
		fs.Usage()
		return errUsage
	}
	return nil
}

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "version", "Print the version of this build.", stderr)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "edgeheal", version)
	return nil
}
