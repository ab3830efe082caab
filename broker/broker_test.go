package broker

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
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
		b, err := ParseURL(tt.in)
		switch {
		case tt.wantFail != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantFail) {
				t.Errorf("ParseURL(%q) = %+v, %v; want an error saying %q", tt.in, b, err, tt.wantFail)
			}
		case err != nil || b.Addr() != tt.want || b.TLS != tt.wantTLS:
			t.Errorf("ParseURL(%q) = %+v (%s), %v; want %s, tls %v", tt.in, b, b.Addr(), err, tt.want, tt.wantTLS)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"tcp://broker:1883", "ssl://[fd00::1]:8883", "broker:1883", "mqtts://", "tcp://:0", "%zz://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseURL(s)
		if err != nil {
			return
		}
		if _, _, err := net.SplitHostPort(b.Addr()); err != nil || b.Port < 1 || b.Port > 65535 {
			t.Errorf("ParseURL(%q) = %+v, whose address %q is not host:port: %v", s, b, b.Addr(), err)
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

func TestParseURLRefusesCredentialsWithoutShowingThem(t *testing.T) {
	for _, in := range []string{
		"tcp://user:pw-s3cret@host:1883",
		"ssl://pw-s3cret@host:8883",
		"mqtts://user:pw-s3cret@[fd00::1]:8883",
		"user:pw-s3cret@host:1883", // no scheme: still an authority with credentials
		"tcp://user:pw-s3cret@host:bad",
	} {
		_, err := ParseURL(in)
		if err == nil || !strings.Contains(err.Error(), "credentials do not belong in a broker URL") {
			t.Errorf("ParseURL(%q) = %v, want it refused for its credentials", in, err)
			continue
		}
		if strings.Contains(err.Error(), "pw-s3cret") || strings.Contains(err.Error(), "user:") {
			t.Errorf("the error for %q shows the credentials: %v", in, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://host:1883":              "tcp://host:1883",
		"tcp://u:p@host:1883":          "tcp://***@host:1883",
		"tcp://u:p@x@host:1883":        "tcp://***@host:1883",
		"u:p@host:1883":                "***@host:1883",
		"tcp://host:1883/a@b":          "tcp://host:1883/a@b", // not the authority
		"ssl://u@[fd00::1]:8883?x=y@z": "ssl://***@[fd00::1]:8883?x=y@z",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
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

// A password file, a CA, a certificate or a key that is a FIFO or a link
// to /dev/zero is refused at once, naming the file: never a wait for a
// writer that does not come (the workload probes stalled until the
// watchdog restarted the agent), never a device read into memory.
func TestSecretsAndTLSFilesThatAreNotFilesAreRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		read func() error
		file string
	}{
		{"password FIFO", func() error { _, err := ReadPassword(fifo); return err }, fifo},
		{"password /dev/zero", func() error { _, err := ReadPassword(zero); return err }, zero},
		{"CA FIFO", func() error { _, err := TLS{CA: fifo}.ClientConfig("h"); return err }, fifo},
		{"CA /dev/zero", func() error { _, err := TLS{CA: zero}.ClientConfig("h"); return err }, zero},
		{"cert FIFO", func() error { _, err := TLS{Cert: fifo, Key: zero}.ClientConfig("h"); return err }, fifo},
		{"key /dev/zero", func() error {
			cert := filepath.Join(dir, "cert.pem")
			if err := os.WriteFile(cert, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
				return err
			}
			_, err := TLS{Cert: cert, Key: zero}.ClientConfig("h")
			return err
		}, zero},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- tc.read() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.file+" is a") {
					t.Errorf("got %v, want an error naming %s and saying what it is", err, tc.file)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("blocked")
			}
		})
	}
}
