// Package template is Go 1.26.8's text/template (exec.go, funcs.go,
// option.go, template.go, and internal/fmtsort as fmtsort.go) with one
// change: a field name in a template is never looked up as a method
// (exec.go, evalField). Parsing is the standard library's
// text/template/parse, so the template language is the same; only
// method calls on data are gone, and fleet templates' data has none
// (configs/render.go). Two additions for edgeheal render's speed: a
// writer that implements ValueWriter is given each printed value apart
// from the template's text (exec.go, printValue), which render uses to
// parse a rendered file once per shape (configs/render_shape.go); and a
// function of type func(any) (string, error) is called directly rather
// than through reflect.Value.Call (funcs.go, safeCall).
//
// Why: a reachable call of reflect.Value.MethodByName with a name not
// known at build time makes the Go linker keep every exported method of
// every type, used or not. In the daemon, which has `edgeheal render`,
// that was 3.2 MB of a 15.9 MB binary (docs/performance.md, "Binary
// size"). internal/archtest keeps the standard text/template (and
// html/template) out of the daemon.
//
// The code is the Go Authors', under the BSD-style licence in LICENSE.
// To update it, copy the four files and internal/fmtsort/sort.go from
// the new Go release and apply the change again: look for "edgeheal:".
package template
