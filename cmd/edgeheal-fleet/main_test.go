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
	users := filepath.Join(dir, "users")
	os.WriteFile(users, []byte("prometheus:sha256:"+strings.Repeat("ab", 32)+"\n"), 0o600)
	withUsers := filepath.Join(dir, "with-users.yaml")
	os.WriteFile(withUsers, []byte("web: {auth: {users_file: "+users+"}}\n"), 0o644)
	badUsers := filepath.Join(dir, "bad-users.yaml")
	os.WriteFile(badUsers, []byte("web: {auth: {users_file: "+good+"}}\n"), 0o644)
	for _, tt := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"version"}, 0, "edgeheal-fleet dev"},
		{[]string{"config", "check", "--config", good}, 0, good + ": valid (broker ssl://mqtt.example.net:8883, listen 127.0.0.1:9470, 0 users in /etc/edgeheal-fleet/users)"},
		{[]string{"config", "check", "--config", withUsers}, 0, "valid (broker none configured, listen 127.0.0.1:9470, 1 users in " + users + ")"},
		{[]string{"config", "check", "--config", badUsers}, 1, good + ": line 1: \"mqtt\": not a bcrypt hash"},
		{[]string{"user", "token", "prometheus"}, 0, "prometheus:sha256:"},
		{[]string{"user", "token", "a:b"}, 2, "usage: edgeheal-fleet user"},
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
