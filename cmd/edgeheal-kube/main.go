// Command edgeheal-kube is edgeheal's optional Kubernetes reporter: it
// reads the agent's /v1/status on the node (its local API's Unix socket)
// and keeps the Node's condition
// EdgeOverlayHealthy, its events and (when configured) the taint
// edgeheal.io/overlay-dark:NoSchedule in step with it. It is a program of
// its own so that the agent's binary carries no Kubernetes client
// (docs/performance.md, "What client-go costs"). Flags, wiring and
// signals only: every decision is package kube's.
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
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/kube"
)

// version is set at build time (-X main.version=...).
var version = "dev"

const usage = `usage: edgeheal-kube <command> [flags]

  run [--config FILE]   report the agent's view of this node to Kubernetes (kubernetes: in the config)
  version

Exit codes: 0 ok (also: the kubernetes section is off), 1 invalid configuration,
2 usage error or could not run.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Fprintf(stdout, "edgeheal-kube %s\n", version)
		return 0
	case "run":
		return cmdRun(args[1:], stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "edgeheal-kube: unknown command %q\n%s", args[0], usage)
	return 2
}

func cmdRun(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", configs.DefaultPath, "the agent's main configuration file (config.d beside it is read too)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := configs.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "edgeheal-kube: %v\n", err)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return 2
		}
		return 1
	}
	k := cfg.Kubernetes
	if !k.Enabled() {
		log.Info("kubernetes.kubeconfig is empty: nothing to report; exiting", "config", *path)
		return 0
	}
	node := cfg.KubeNode()
	client, err := kube.NewRESTClient(k.Kubeconfig, node, 10*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "edgeheal-kube: kubernetes.kubeconfig: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// No reload: a changed kubernetes section applies at the next start.
	// A SIGHUP meant for the agent (or sent to both) must not end it.
	signal.Ignore(syscall.SIGHUP)
	r := kube.New(kube.Options{
		Client:    client,
		Node:      node,
		Status:    kube.SocketStatus(cfg.Report.HTTP.Socket),
		Interval:  cfg.Interval.D(),
		Stale:     max(30*time.Second, 10*cfg.Interval.D()),
		Taint:     k.Taint,
		Grace:     k.Grace.D(),
		Heartbeat: k.Heartbeat.D(),
		Log:       log,
	})
	log.Info("reporting to Kubernetes", "node", node, "kubeconfig", k.Kubeconfig, "status", cfg.Report.HTTP.Socket, "taint", k.Taint, "version", version)
	if err := r.Run(ctx); err != nil {
		log.Error("stopped", "error", err)
		return 2
	}
	return 0
}
