package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/system"
)

// cmdCleanup runs `edgeheal cleanup`: what an uninstall runs after
// stopping the service (agent.Cleanup).
func cmdCleanup(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cleanup", "cleanup",
		"Undo what edgeheal changed on this node that outlives it: remove its path-MTU clamp tables (nftables inet edgeheal-*) and put back a tunnel MTU it lowered. The package's removal runs it after stopping the service; a running agent would make them again.", stderr)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	sys := system.Open()
	defer sys.Close()
	rs, err := agent.Cleanup(ctx, sys.OS())
	for _, r := range rs {
		for _, c := range r.Changes {
			fmt.Fprintf(stdout, "%s %s: %s\n", r.Action, r.Target, c)
		}
	}
	if err != nil {
		return fail(exitCantRun, fmt.Errorf("cleaning up: %w", err))
	}
	if len(rs) == 0 {
		fmt.Fprintln(stdout, "nothing of edgeheal's to remove")
	}
	return nil
}
