package render

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// fleetInventory is n nodes spread over the shipped sites and classes, as
// a large fleet's inventory would be: every fourth node a worker, the
// gateways alternating LTE and fiber.
func fleetInventory(b *testing.B, n int) *Inventory {
	b.Helper()
	inv, err := LoadInventory(filepath.Join(shipped, "inventory.example.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	sites := []string{"plant-7", "plant-9"}
	classes := []string{"gw-lte", "gw-fiber", "gw-lte", "worker"}
	inv.Nodes = inv.Nodes[:0]
	for i := range n {
		node := Node{Name: fmt.Sprintf("node-%05d", i), Site: sites[i%len(sites)], Class: classes[i%len(classes)]}
		if node.Class == "gw-lte" {
			node.Vars = map[string]any{"uplink": "wwan0"}
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	return inv
}

// BenchmarkRender10000 is `edgeheal-fleet render` of 10,000 nodes from the
// shipped templates (docs/performance.md, "edgeheal-fleet render at fleet
// scale"; the goal is under 5 s on the build machine). render+validate
// renders and validates every node and writes nothing. command/cold is
// what the command does after reading its inputs, Render then Write, into
// a new, empty directory; command/unchanged the same again into a
// directory that already holds the same files (a re-render in which
// nothing changed); command/100-changed with 100 nodes' dry_run flipped
// each time (a re-render in which a few nodes changed). write/cold is the
// writing alone, into a new directory: the file system's share.
//
// cpu-s/op is the process's user and system CPU time per run: on a
// machine shared with other work it varies less than the wall time.
// EDGEHEAL_BENCH_DIR puts the output directories there instead of under
// the test's temporary directory (to compare file systems: /dev/shm
// against the disk).
func BenchmarkRender10000(b *testing.B) {
	tmpl, err := LoadTemplates(shipped)
	if err != nil {
		b.Fatal(err)
	}
	inv := fleetInventory(b, 10000)
	flipped := fleetInventory(b, 10000)
	for i := 0; i < len(flipped.Nodes); i += 100 {
		flipped.Nodes[i].Vars = mergeVars(map[string]any{"dry_run": true}, flipped.Nodes[i].Vars)
	}
	render := func(b *testing.B, inv *Inventory) []File {
		files, err := tmpl.Render(inv)
		if err != nil {
			b.Fatal(err)
		}
		return files
	}
	write := func(b *testing.B, dir string, files []File) int {
		written, err := Write(dir, files)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, w := range written {
			if w {
				n++
			}
		}
		return n
	}
	command := func(b *testing.B, dir string, inv *Inventory) int {
		return write(b, dir, render(b, inv))
	}
	files := render(b, inv)
	populated := benchDir(b)
	write(b, populated, files)
	b.Run("render+validate", func(b *testing.B) {
		measure(b, func() { render(b, inv) })
	})
	b.Run("command/cold", func(b *testing.B) {
		measure(b, func() {
			if n := command(b, benchDir(b), inv); n != len(inv.Nodes) {
				b.Fatalf("%d files written, want %d", n, len(inv.Nodes))
			}
		})
	})
	b.Run("command/unchanged", func(b *testing.B) {
		measure(b, func() {
			if n := command(b, populated, inv); n != 0 {
				b.Fatalf("%d files written, want none", n)
			}
		})
	})
	b.Run("command/100-changed", func(b *testing.B) {
		invs := []*Inventory{flipped, inv}
		i := 0
		measure(b, func() {
			if n := command(b, populated, invs[i%2]); n != 100 {
				b.Fatalf("%d files written, want 100", n)
			}
			i++
		})
		if i%2 == 1 { // leave populated as inv renders it
			write(b, populated, files)
		}
	})
	b.Run("write/cold", func(b *testing.B) {
		measure(b, func() { write(b, benchDir(b), files) })
	})
	if !slices.EqualFunc(files, render(b, inv), func(x, y File) bool { return x.Name == y.Name && string(x.Data) == string(y.Data) }) {
		b.Fatal("the same inventory rendered different files")
	}
}

// measure runs op in b.Loop and reports the process's CPU time per op.
func measure(b *testing.B, op func()) {
	b.ReportAllocs()
	before := cpuTime(b)
	for b.Loop() {
		op()
	}
	b.ReportMetric((cpuTime(b)-before).Seconds()/float64(b.N), "cpu-s/op")
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchDir is a new, empty directory for rendered files, removed after
// the benchmark: under EDGEHEAL_BENCH_DIR when that is set.
func benchDir(b *testing.B) string {
	parent := os.Getenv("EDGEHEAL_BENCH_DIR")
	if parent == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(parent, "render-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
