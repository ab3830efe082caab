package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseBrokerURLRefusesCredentialsWithoutShowingThem(t *testing.T) {
	for _, in := range []string{
		"tcp://user:pw-s3cret@host:1883",
		"ssl://pw-s3cret@host:8883",
		"mqtts://user:pw-s3cret@[fd00::1]:8883",
		"user:pw-s3cret@host:1883", // no scheme: still an authority with credentials
		"tcp://user:pw-s3cret@host:bad",
	} {
		_, err := ParseBrokerURL(in)
		if err == nil || !strings.Contains(err.Error(), "credentials do not belong in a broker URL") {
			t.Errorf("ParseBrokerURL(%q) = %v, want it refused for its credentials", in, err)
			continue
		}
		if strings.Contains(err.Error(), "pw-s3cret") || strings.Contains(err.Error(), "user:") {
			t.Errorf("the error for %q shows the credentials: %v", in, err)
		}
	}
}

func TestRedactBrokerURL(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://host:1883":              "tcp://host:1883",
		"tcp://u:p@host:1883":          "tcp://***@host:1883",
		"tcp://u:p@x@host:1883":        "tcp://***@host:1883",
		"u:p@host:1883":                "***@host:1883",
		"tcp://host:1883/a@b":          "tcp://host:1883/a@b", // not the authority
		"ssl://u@[fd00::1]:8883?x=y@z": "ssl://***@[fd00::1]:8883?x=y@z",
	} {
		if got := RedactBrokerURL(in); got != want {
			t.Errorf("RedactBrokerURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidateRefusesAPasswordOverPlaintextUnlessTheConfigAcceptsIt(t *testing.T) {
	const file = "/etc/edgeheal/config.d/50-report.yaml"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"a password over tcp://", `report: {mqtt: {broker: "tcp://cloud:1883", username: n1, password_file: /etc/edgeheal/pw}}`,
			[]string{file + `: report.mqtt.password_file: the password would cross the network in clear: tcp://cloud:1883 is plain tcp://; use ssl://, tls:// or mqtts://, or set report.mqtt.insecure_plaintext: true to accept that`}},
		{"a password over mqtt://", `report: {mqtt: {broker: "mqtt://cloud:1883", username: n1, password_file: /etc/edgeheal/pw}}`,
			[]string{file + `: report.mqtt.password_file: the password would cross the network in clear: mqtt://cloud:1883 is plain mqtt://`}},
		{"credentials in the URL", `report: {mqtt: {broker: "tcp://user:pw@cloud:1883"}}`,
			[]string{file + `: report.mqtt.broker: "tcp://***@cloud:1883": credentials do not belong in a broker URL`}},
		{"a password over tcp:// accepted by the config", `report: {mqtt: {broker: "tcp://cloud:1883", username: n1, password_file: /etc/edgeheal/pw, insecure_plaintext: true}}`, nil},
		{"a password over TLS", `report: {mqtt: {broker: "ssl://cloud:8883", username: n1, password_file: /etc/edgeheal/pw}}`, nil},
		{"no password over tcp://", `report: {mqtt: {broker: "tcp://cloud:1883", username: n1}}`, nil},
		{"reconnect limits out of range and crossed", `report: {mqtt: {reconnect: {probe_interval: 10ms, min_delay: 5m, max_delay: 1m, connect_jitter: 11m}}}`,
			[]string{
				file + ": report.mqtt.reconnect.probe_interval: 10ms is out of range (100ms..600s)",
				file + ": report.mqtt.reconnect.connect_jitter: 660s is out of range (0..600s)",
				file + ": report.mqtt.reconnect.max_delay: 60s is below min_delay 300s",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(file, []byte("version: 1\nnode: {name: n1}\n"+tt.yaml+"\n"))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Parse = %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Parse succeeded, want problems")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("problems lack\n  %s\ngot:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "pw@") {
				t.Errorf("a problem shows the URL's credentials: %v", err)
			}
		})
	}
}

func TestPlaintextWarning(t *testing.T) {
	m := ReportMQTT{Broker: "tcp://cloud:1883", PasswordFile: "/etc/edgeheal/pw", InsecurePlaintext: true}
	if w := m.PlaintextWarning(); !strings.Contains(w, "crosses the network in clear to tcp://cloud:1883") {
		t.Errorf("warning %q, want one naming the broker", w)
	}
	for _, m := range []ReportMQTT{
		{Broker: "ssl://cloud:8883", PasswordFile: "/etc/edgeheal/pw", InsecurePlaintext: true},
		{Broker: "tcp://cloud:1883", InsecurePlaintext: true},
		{Broker: "tcp://cloud:1883", PasswordFile: "/etc/edgeheal/pw"},
	} {
		if w := m.PlaintextWarning(); w != "" {
			t.Errorf("%+v: warning %q, want none", m, w)
		}
	}
}

func TestCheckSecretFile(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o400, false}, {0o640, true}, {0o604, true}, {0o620, true}} {
		p := filepath.Join(dir, "secret")
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tt.mode); err != nil {
			t.Fatal(err)
		}
		err := CheckSecretFile(p)
		if (err != nil) != tt.warn {
			t.Errorf("mode %04o: %v, want a warning: %v", tt.mode, err, tt.warn)
		}
		if err != nil && !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode %04o: %v, want the fix in it", tt.mode, err)
		}
	}
	if err := CheckSecretFile(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a missing file: %v, want nothing (reading it reports it)", err)
	}
}

func TestSecretFilesListsEveryPasswordAndKeyFile(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte(`version: 1
node: {name: n1}
report: {mqtt: {broker: "ssl://cloud:8883", username: n1, password_file: /etc/edgeheal/pw, tls: {cert: /etc/edgeheal/c.pem, key: /etc/edgeheal/c.key}}}
workloads:
  - {name: w, netns: /var/run/netns/x, mqtt: {broker: "tcp://10.0.0.1:1883", username: w, password_file: /etc/edgeheal/w.pw}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []SecretFile{
		{"report.mqtt.password_file", "/etc/edgeheal/pw"},
		{"report.mqtt.tls.key", "/etc/edgeheal/c.key"},
		{"workloads[0].mqtt.password_file", "/etc/edgeheal/w.pw"},
	}
	if diff := cmp.Diff(want, cfg.SecretFiles()); diff != "" {
		t.Errorf("SecretFiles (-want +got):\n%s", diff)
	}
}
