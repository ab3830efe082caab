package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name, "config.yaml")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	off := write("off", "version: 1\n")
	bad := write("bad", "version: 1\nkubernetes: {kubeconfig: relative.kubeconfig}\n")
	missing := write("missing", "version: 1\nkubernetes: {kubeconfig: "+filepath.Join(dir, "none.kubeconfig")+"}\n")
	cases := []struct {
		name string
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{"version", []string{"version"}, 0, "edgeheal-kube "},
		{"no command", nil, 2, "usage:"},
		{"an unknown command", []string{"nope"}, 2, `unknown command "nope"`},
		{"the section off: nothing to do, and it says so", []string{"run", "--config", off}, 0, "kubernetes.kubeconfig is empty"},
		{"an invalid section names the file and key", []string{"run", "--config", bad}, 1, bad + ": kubernetes.kubeconfig: \"relative.kubeconfig\": an absolute path is needed"},
		{"a kubeconfig that cannot be read", []string{"run", "--config", missing}, 2, "kubernetes.kubeconfig: reading kubeconfig"},
		{"no config file", []string{"run", "--config", filepath.Join(dir, "absent.yaml")}, 2, "absent.yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			all := out.String() + errb.String()
			if code != c.code || !strings.Contains(all, c.out) {
				t.Errorf("run(%q) = %d, %q; want %d and %q", c.args, code, all, c.code, c.out)
			}
		})
	}
}
