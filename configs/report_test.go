package configs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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

func TestValidateRefusesTLSWithAPlainBrokerURL(t *testing.T) {
	cfg, err := Parse("/etc/edgeheal/config.yaml", []byte(`version: 1
node: {name: n1}
report:
  mqtt: {broker: "tcp://cloud:1883", tls: {ca: /etc/edgeheal/ca.pem}}
`))
	if err == nil || !strings.Contains(err.Error(), `report.mqtt.broker: "tcp://cloud:1883" is plain tcp:// but tls is configured`) {
		t.Errorf("Parse = %v, %v; want a problem naming the plain URL", cfg, err)
	}
}
