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
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("mqtt: {broker: \"ssl://mqtt.example.net:8883\"}\n"), 0o644)
	os.WriteFile(bad, []byte("mqtt: {broker: \"tcp://h:1883\", tls: {ca: /ca.pem}}\ncolour: red\n"), 0o644)
	for _, tt := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"version"}, 0, "edgeheal-fleet dev"},
		{[]string{"config", "check", "--config", good}, 0, good + ": valid (broker ssl://mqtt.example.net:8883, listen 127.0.0.1:9470)"},
		{[]string{"config", "check", "--config", bad}, 1, bad + ": line 2: colour: unknown key"},
		{[]string{"config", "check", "--config", filepath.Join(dir, "none.yaml")}, 2, "no such file or directory"},
		{[]string{"run", "--config", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{nil, 2, "usage: edgeheal-fleet"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String()+stderr.String(), tt.out) {
			t.Errorf("edgeheal-fleet %v: exit %d, output %q; want exit %d and %q", tt.args, code, stdout.String()+stderr.String(), tt.code, tt.out)
		}
	}
}
