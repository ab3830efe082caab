package configs

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBrokerURL(t *testing.T) {
	tests := []struct {
		in       string
		want     string
		wantTLS  bool
		wantFail string
	}{
		{in: "tcp://broker:1883", want: "broker:1883"},
		{in: "mqtt://broker:1883", want: "broker:1883"},
		{in: "ssl://broker:8883", want: "broker:8883", wantTLS: true},
		{in: "tls://broker:8883", want: "broker:8883", wantTLS: true},
		{in: "mqtts://10.0.0.1:9883", want: "10.0.0.1:9883", wantTLS: true},
		{in: "tcp://[fd00::1]:1883", want: "[fd00::1]:1883"},
		{in: "tcp://broker", wantFail: "give host and port"},
		{in: "broker:1883", wantFail: "scheme must be"},
		{in: "", wantFail: "scheme must be"},
		{in: "tcp://:1883", wantFail: "give host and port"},
		{in: "tcps://broker:8883", wantFail: "scheme must be"},
		{in: "mqtt+ssl://broker:8883", wantFail: "scheme must be"},
		{in: "tcp://broker:70000", wantFail: "not a port number"},
		{in: "tcp://broker:1883/x", wantFail: "has no path"},
	}
	for _, tt := range tests {
		b, err := ParseBrokerURL(tt.in)
		switch {
		case tt.wantFail != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantFail) {
				t.Errorf("ParseBrokerURL(%q) = %+v, %v; want an error saying %q", tt.in, b, err, tt.wantFail)
			}
		case err != nil || b.Addr() != tt.want || b.TLS != tt.wantTLS:
			t.Errorf("ParseBrokerURL(%q) = %+v (%s), %v; want %s, tls %v", tt.in, b, b.Addr(), err, tt.want, tt.wantTLS)
		}
	}
}

func FuzzParseBrokerURL(f *testing.F) {
	for _, s := range []string{"tcp://broker:1883", "ssl://[fd00::1]:8883", "broker:1883", "mqtts://", "tcp://:0", "%zz://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBrokerURL(s)
		if err != nil {
			return
		}
		if _, _, err := net.SplitHostPort(b.Addr()); err != nil || b.Port < 1 || b.Port > 65535 {
			t.Errorf("ParseBrokerURL(%q) = %+v, whose address %q is not host:port: %v", s, b, b.Addr(), err)
		}
	})
}

func TestReadPassword(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if pw, err := ReadPassword(write("pw", "s3cret\n")); err != nil || pw != "s3cret" {
		t.Errorf("a password with a line end: %q, %v; want s3cret", pw, err)
	}
	if pw, err := ReadPassword(write("crlf", " with space \r\n")); err != nil || pw != " with space " {
		t.Errorf("only the line end is removed: %q, %v", pw, err)
	}
	if _, err := ReadPassword(write("empty", "\n")); err == nil || !strings.Contains(err.Error(), "it is empty") {
		t.Errorf("an empty file: %v, want an error saying it is empty", err)
	}
	_, err := ReadPassword(filepath.Join(dir, "missing"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want os.ErrNotExist", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("an error shows a password: %v", err)
	}
}

func TestTLSClientConfigNamesTheFileThatIsMissing(t *testing.T) {
	_, err := TLS{CA: "/nonexistent/ca.pem"}.ClientConfig("broker")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Errorf("err = %v, want one naming the missing CA file", err)
	}
	c, err := TLS{}.ClientConfig("broker.example")
	if err != nil || c.ServerName != "broker.example" || c.RootCAs != nil {
		t.Errorf("no files: %+v, %v; want the system roots and the host as the server name", c, err)
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
