package template

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	stdtemplate "text/template"
	"time"
)

// fleetData is shaped like the data configs/render.go executes with: a
// struct of strings and a map of YAML values.
type fleetData struct {
	Node struct{ Name, Site, Class string }
	Vars map[string]any
}

func testData() fleetData {
	d := fleetData{Vars: map[string]any{
		"keepalive": "20s",
		"peers":     []any{"a", "b", "c"},
		"broker":    map[string]any{"host": "mqtt.example", "port": 8883},
		"debug":     false,
		"ratio":     0.5,
		"empty":     map[string]any{},
		"zones":     map[string]any{"b": 2, "a": 1, "c": 3},
	}}
	d.Node.Name, d.Node.Site, d.Node.Class = "edge-1", "plant-7", "gateway"
	return d
}

func quote(v any) string { return fmt.Sprintf("%q", fmt.Sprint(v)) }

// strict has the type the fork calls without reflection (funcs.go,
// safeCall): its results, its error and its panic must come out as
// text/template gives them.
func strict(v any) (string, error) {
	switch v {
	case nil:
		return "", errors.New("strict: the value is null")
	case "boom":
		panic("strict: boom")
	}
	return fmt.Sprint(v), nil
}

// must is helper.go's Must, which the copy leaves out.
func must(t *Template, err error) *Template {
	if err != nil {
		panic(err)
	}
	return t
}

// TestTheForkRendersWhatTextTemplateRenders runs the same templates
// through the standard library's text/template and this copy: every
// construct fleet templates use gives the same bytes, and the same
// templates fail.
func TestTheForkRendersWhatTextTemplateRenders(t *testing.T) {
	for _, tt := range []struct{ name, text string }{
		{"fields of the node and map keys", "node: {name: {{.Node.Name}}, site: {{.Node.Site}}}\nka: {{.Vars.keepalive}} port: {{.Vars.broker.port}}"},
		{"range over a list with index", "{{range $i, $p := .Vars.peers}}{{$i}}={{$p}} {{end}}"},
		{"range over a map is in key order", "{{range $k, $v := .Vars.zones}}{{$k}}:{{$v}},{{end}}"},
		{"range else on an empty map", "{{range .Vars.empty}}x{{else}}none{{end}}"},
		{"if, else if, with, and comparisons", "{{if eq .Node.Class \"hub\"}}hub{{else if ne .Node.Class \"\"}}{{.Node.Class}}{{end}} {{with .Vars.broker}}{{.host}}{{end}} {{if and (not .Vars.debug) (gt .Vars.ratio 0.1)}}on{{end}}"},
		{"variables, pipelines and printf", "{{$n := .Node.Name}}{{$n | printf \"%q\"}} {{len .Vars.peers}} {{index .Vars.peers 1}} {{slice .Vars.peers 1 2}}"},
		{"functions from the FuncMap", "{{quote .Vars.broker.host}} {{.Node.Site | quote}}"},
		{"a func(any) (string, error)", "{{strict .Node.Name}} {{.Vars.broker.port | strict}} {{strict .Vars.peers}}"},
		{"a func(any) (string, error) that fails", "{{strict .Node.Name}} {{strict nil}}"},
		{"a func(any) (string, error) that panics", "{{strict \"boom\"}}"},
		{"block and define", "{{block \"uplinks\" .}}default {{.Node.Name}}{{end}}|{{template \"uplinks\" .}}"},
		{"break and continue", "{{range .Vars.peers}}{{if eq . \"b\"}}{{continue}}{{end}}{{if eq . \"c\"}}{{break}}{{end}}{{.}}{{end}}"},
		{"trim markers and comments", "a  {{- /* note */ -}}  b"},
		{"a missing key fails", "{{.Vars.nope}}"},
		{"a missing field fails", "{{.Node.Rack}}"},
		{"a wrong argument type fails", "{{index .Vars.peers \"x\"}}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := testData()
			var want bytes.Buffer
			std, err := stdtemplate.New("t").Option("missingkey=error").Funcs(stdtemplate.FuncMap{"quote": quote, "strict": strict}).Parse(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			wantErr := std.Execute(&want, data)
			var got bytes.Buffer
			ours, err := New("t").Option("missingkey=error").Funcs(FuncMap{"quote": quote, "strict": strict}).Parse(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			gotErr := ours.Execute(&got, data)
			if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
				t.Fatalf("error %v, text/template's %v", gotErr, wantErr)
			}
			if got.String() != want.String() {
				t.Errorf("rendered %q, text/template %q", got.String(), want.String())
			}
		})
	}
}

// TestAMethodOfTheDataIsNotCalled: the one difference. text/template
// calls a method named like the field; the fork reports the name as a
// field the type lacks, so a template cannot reach methods (and the
// linker need not keep them).
func TestAMethodOfTheDataIsNotCalled(t *testing.T) {
	data := map[string]any{"at": time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
	text := "{{.at.Year}}"
	var std bytes.Buffer
	if err := stdtemplate.Must(stdtemplate.New("t").Parse(text)).Execute(&std, data); err != nil || std.String() != "2026" {
		t.Fatalf("text/template: %q, %v: the premise changed", std.String(), err)
	}
	var got bytes.Buffer
	err := must(New("t").Parse(text)).Execute(&got, data)
	if err == nil || !strings.Contains(err.Error(), "can't evaluate field Year") {
		t.Errorf("rendered %q, err %v; want the method refused as a missing field", got.String(), err)
	}
	// The value itself still prints as fmt prints it.
	got.Reset()
	if err := must(New("t").Parse("{{.at}}")).Execute(&got, data); err != nil || got.String() != "2026-05-01 00:00:00 +0000 UTC" {
		t.Errorf("{{.at}} rendered %q, %v", got.String(), err)
	}
}

// valueLog is a ValueWriter that logs what it is given.
type valueLog struct{ log []string }

func (v *valueLog) Write(p []byte) (int, error) {
	v.log = append(v.log, "text "+string(p))
	return len(p), nil
}

func (v *valueLog) WriteValue(text string) error {
	v.log = append(v.log, "value "+text)
	return nil
}

// A ValueWriter gets the template's text by Write and each printed value
// by WriteValue, as fmt.Sprint formats it.
func TestAValueWriterIsGivenEachValueApart(t *testing.T) {
	var got valueLog
	text := "name: {{.Node.Name}} port: {{.Vars.broker.port}}{{if .Vars.debug}}x{{end}} {{quote .Node.Site}}\n"
	if err := must(New("t").Funcs(FuncMap{"quote": quote}).Parse(text)).Execute(&got, testData()); err != nil {
		t.Fatal(err)
	}
	want := []string{"text name: ", "value edge-1", "text  port: ", "value 8883", "text  ", `value "plant-7"`, "text \n"}
	if strings.Join(got.log, "|") != strings.Join(want, "|") {
		t.Errorf("writes %q, want %q", got.log, want)
	}
}
