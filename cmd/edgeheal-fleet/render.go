package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/edgeheal/edgeheal/fleet/render"
)

const renderUsage = `usage: edgeheal-fleet render --templates DIR --inventory FILE --out DIR

Render fleet templates into one plain, validated config per node: DIR/<node>.yaml.
Strict: a variable no layer sets fails its node. Every node is validated as
'edgeheal config check' would; if any node fails, all failures are listed and
nothing is written. Same input, same bytes. A file DIR already holds with the
same bytes is left alone (reported unchanged); the others are replaced
atomically. Ship each file to its node as /etc/edgeheal/config.d/50-fleet.yaml.

Exit codes: 0 every node valid and written or unchanged, 1 a node failed or an
input is malformed, 2 usage error or an input or output that could not be used.

Flags:
`

// cmdRender renders fleet templates into one plain config per node. Exit 0
// when every node rendered and validated (files written or already there
// with the same bytes), 1 when any node failed (every failure listed,
// nothing written) or the base template or inventory is malformed, 2 on a
// usage error, an input that could not be read or an output that could
// not be written.
func cmdRender(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, renderUsage)
		fs.PrintDefaults()
	}
	templates := fs.String("templates", "", "fleet templates directory (base.yaml.tmpl, classes/, sites/)")
	inventory := fs.String("inventory", "", "inventory file: the nodes with their site, class and vars")
	out := fs.String("out", "", "output directory, created if missing; files of nodes not in the inventory are left as they are")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edgeheal-fleet render: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *templates == "" || *inventory == "" || *out == "" {
		fmt.Fprintln(stderr, "edgeheal-fleet render: --templates, --inventory and --out are all required")
		fs.Usage()
		return 2
	}
	tmpl, err := render.LoadTemplates(*templates)
	if err != nil {
		return inputFailed(stderr, err)
	}
	inv, err := render.LoadInventory(*inventory)
	if err != nil {
		return inputFailed(stderr, err)
	}
	files, err := tmpl.Render(inv)
	if err != nil {
		fmt.Fprintf(stderr, "edgeheal-fleet: render: nothing written: %v\n", err)
		return 1
	}
	written, err := render.Write(*out, files)
	if err != nil {
		fmt.Fprintf(stderr, "edgeheal-fleet: %v\n", err)
		return 2
	}
	printRendered(stdout, *out, files, written)
	return 0
}

// inputFailed reports an input render could not use: exit 2 when it could
// not be read, 1 when it is malformed.
func inputFailed(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "edgeheal-fleet: %v\n", err)
	if unreadable(err) {
		return 2
	}
	return 1
}

// printRendered says, a line a node, whether its file was written, then
// counts them.
func printRendered(stdout io.Writer, out string, files []render.File, written []bool) {
	w := bufio.NewWriter(stdout) // a line a node: 10,000 writes unbuffered
	defer w.Flush()
	changed := 0
	for i, f := range files {
		what := "unchanged"
		if written[i] {
			what, changed = "written", changed+1
		}
		fmt.Fprintf(w, "%s: %s valid, %s\n", f.Node, f.Name, what)
	}
	fmt.Fprintf(w, "rendered %d node(s) into %s: %d written, %d unchanged\n", len(files), out, changed, len(files)-changed)
}
