package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/edgeheal/edgeheal/configs"
)

// cmdRender renders fleet templates into one plain config per node. Exit 0
// when every node rendered and validated (files written or already there
// with the same bytes), 1 when any node
// failed (every failure listed, nothing written), 2 on a usage error or an
// input that could not be read.
func cmdRender(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("render", "render --templates DIR --inventory FILE --out DIR",
		"Render fleet templates into one plain, validated config per node: DIR/<node>.yaml.\n"+
			"Strict: a variable no layer sets fails its node. Every node is validated as\n"+
			"'edgeheal config check' would; if any node fails, all failures are listed and\n"+
			"nothing is written. Same input, same bytes. A file DIR already holds with the\n"+
			"same bytes is left alone (reported unchanged); the others are replaced\n"+
			"atomically. Ship each file to its node as /etc/edgeheal/config.d/50-fleet.yaml.", stderr)
	templates := fs.String("templates", "", "fleet templates directory (base.yaml.tmpl, classes/, sites/)")
	inventory := fs.String("inventory", "", "inventory file: the nodes with their site, class and vars")
	out := fs.String("out", "", "output directory, created if missing; files of nodes not in the inventory are left as they are")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *templates == "" || *inventory == "" || *out == "" {
		fmt.Fprintln(stderr, "edgeheal render: --templates, --inventory and --out are all required")
		fs.Usage()
		return errUsage
	}
	fleet, err := configs.LoadFleet(*templates)
	if err == nil {
		var inv *configs.Inventory
		if inv, err = configs.LoadInventory(*inventory); err == nil {
			return writeRendered(fleet, inv, *out, stdout)
		}
	}
	if configs.IsReadError(err) {
		return fail(exitCantRun, err)
	}
	return fail(exitProblem, err)
}

// writeRendered renders every node into out and says what it wrote.
func writeRendered(fleet *configs.Fleet, inv *configs.Inventory, out string, stdout io.Writer) error {
	files, written, err := fleet.RenderInto(inv, out)
	var re *configs.RenderError
	switch {
	case errors.As(err, &re):
		return fail(exitProblem, fmt.Errorf("render: nothing written: %w", err))
	case err != nil:
		return fail(exitCantRun, err)
	}
	bw := bufio.NewWriter(stdout) // a line a node: 10,000 writes unbuffered
	defer bw.Flush()
	stdout = bw
	changed := 0
	for i, f := range files {
		what := "unchanged"
		if written[i] {
			what, changed = "written", changed+1
		}
		fmt.Fprintf(stdout, "%s: %s valid, %s\n", f.Node, f.File, what)
	}
	fmt.Fprintf(stdout, "rendered %d node(s) into %s: %d written, %d unchanged\n", len(files), out, changed, len(files)-changed)
	return nil
}
