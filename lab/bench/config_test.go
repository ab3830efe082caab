package bench

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite configs/examples/demo.yaml from the template")

// The shipped demo config is the template rendered for the lab prefix
// "demo": a change to either shows up here.
func TestDemoExampleIsTheRenderedTemplate(t *testing.T) {
	got, err := Config(DemoParams())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "configs", "examples", "demo.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs from the template (-want +got); regenerate with go test ./lab/bench -run Example -update:\n%s", path, diff)
	}
}
