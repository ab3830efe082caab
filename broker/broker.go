// Package broker reads MQTT broker addresses and credentials the one way
// every edgeheal program reads them: broker URLs (scheme, host, port; no
// credentials in them), TLS client settings from files, password files
// read at each use. The agent's config validation, its workload probes and
// reporter, and the fleet view share it; it knows nothing of any program's
// configuration schema beyond the four TLS keys they all write the same.
// It imports nothing of ours but regfile, the one way files are read.
package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/edgeheal/edgeheal/regfile"
)

// URL is an MQTT broker address as configured: a scheme that says
// whether the connection uses TLS, a host and a port. It is the one parser
// of broker addresses: validation, the workload probe and the publisher
// all use it.
type URL struct {
	Scheme string // as written: tcp, mqtt, ssl, tls or mqtts
	Host   string // a name or an IP address
	Port   int
	TLS    bool // ssl, tls and mqtts
}

// Schemes are the schemes a broker URL may have; the first two are
// plain, the others TLS.
var Schemes = []string{"tcp", "mqtt", "ssl", "tls", "mqtts"}

// ParseURL parses "scheme://host:port". The port is required (a
// default would hide a typo'd URL behind the wrong port), a broker URL has
// no path, and no credentials: a "user:password@" part is refused (the URL
// is shown in logs, the status and errors; the password belongs in a
// password file). No error repeats what was written before an "@".
func ParseURL(s string) (URL, error) {
	if shown := Redact(s); shown != s {
		return URL{}, fmt.Errorf("%q: credentials do not belong in a broker URL (it is shown in logs and the status): set username and password_file instead", shown)
	}
	u, err := url.Parse(s)
	if err != nil {
		return URL{}, fmt.Errorf("%q is not a broker URL: %v", s, err)
	}
	b := URL{Scheme: u.Scheme}
	switch u.Scheme {
	case "tcp", "mqtt":
	case "ssl", "tls", "mqtts":
		b.TLS = true
	default:
		return URL{}, fmt.Errorf("%q: scheme must be %s", s, strings.Join(Schemes, ", "))
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return URL{}, fmt.Errorf("%q: give host and port, e.g. tcp://10.43.0.10:1883", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return URL{}, fmt.Errorf("%q: port %q is not a port number", s, port)
	}
	if u.Path != "" && u.Path != "/" {
		return URL{}, fmt.Errorf("%q: a broker URL has no path", s)
	}
	b.Host, b.Port = host, n
	return b, nil
}

// Addr is host:port, for dialing.
func (b URL) Addr() string { return net.JoinHostPort(b.Host, strconv.Itoa(b.Port)) }

// String is scheme://host:port: what logs and the status show.
func (b URL) String() string { return b.Scheme + "://" + b.Addr() }

// Redact returns s with anything before an "@" in its authority
// (user and password) replaced by "***", and s itself when it has none.
// A string without "://" is treated as all authority up to its first "/",
// so that "user:pw@host:1883" is redacted too.
func Redact(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	end := len(s)
	if i := strings.IndexAny(s[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(s[start:end], "@")
	if at < 0 {
		return s
	}
	return s[:start] + "***" + s[start+at:]
}

// CheckSecretFile reports a password or key file that users other than
// its owner may read or write: a warning for the operator, not a reason to
// refuse it (the file may be in use while its mode is fixed). A file that
// cannot be read is not reported here: reading it reports that.
func CheckSecretFile(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return nil
	}
	return fmt.Errorf("%s is accessible by group or others (mode %04o): chmod 600 %s", path, st.Mode().Perm(), path)
}

// TLS is how a program connects to a broker over TLS: the CA that signs
// the broker's certificate (none: the system roots), a client certificate
// and key for mutual TLS, and the name to verify (none: the broker URL's
// host). The keys are the same in every program's configuration.
type TLS struct {
	CA         string `yaml:"ca"`
	Cert       string `yaml:"cert"`
	Key        string `yaml:"key"`
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether any TLS setting is present.
func (t TLS) Enabled() bool { return t != TLS{} }

// ClientConfig loads t's files into a TLS client configuration for a broker
// at host: the CA (none: the system roots), the client certificate and key
// for mutual TLS, and the server name to verify (ServerName, or host).
// Errors name the file and never contain a key.
func (t TLS) ClientConfig(host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	if t.CA != "" {
		pem, err := regfile.Read(t.CA, regfile.PEMLimit)
		if err != nil {
			return nil, fmt.Errorf("reading the broker CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading the broker CA %s: no PEM certificate in it", t.CA)
		}
		cfg.RootCAs = pool
	}
	if t.Cert != "" || t.Key != "" {
		certPEM, err := regfile.Read(t.Cert, regfile.PEMLimit)
		if err != nil {
			return nil, fmt.Errorf("reading the client certificate: %w", err)
		}
		keyPEM, err := regfile.Read(t.Key, regfile.PEMLimit)
		if err != nil {
			return nil, fmt.Errorf("reading the client key: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate %s: %w", t.Cert, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ReadPassword reads a password file, as edgeheal reads every one of them:
// at each use (a rotated password is picked up), with only a trailing line
// end removed. An empty file is an error: a password file that is set is
// meant to hold a password. Errors never contain the file's content. Like
// the TLS files, it must be a regular file (a FIFO is refused, never
// waited on) of a bounded size (regfile).
func ReadPassword(path string) (string, error) {
	b, err := regfile.Read(path, regfile.SecretLimit)
	if err != nil {
		return "", fmt.Errorf("reading the mqtt password file: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("reading the mqtt password file %s: it is empty", path)
	}
	return pw, nil
}
