package configs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// BrokerURL is an MQTT broker address as configured: a scheme that says
// whether the connection uses TLS, a host and a port. It is the one parser
// of broker addresses: validation, the workload probe and the publisher
// all use it.
type BrokerURL struct {
	Scheme string // as written: tcp, mqtt, ssl, tls or mqtts
	Host   string // a name or an IP address
	Port   int
	TLS    bool // ssl, tls and mqtts
}

// BrokerSchemes are the schemes a broker URL may have; the first two are
// plain, the others TLS.
var BrokerSchemes = []string{"tcp", "mqtt", "ssl", "tls", "mqtts"}

// ParseBrokerURL parses "scheme://host:port". The port is required (a
// default would hide a typo'd URL behind the wrong port), a broker URL has
// no path, and no credentials: a "user:password@" part is refused (the URL
// is shown in logs, the status and errors; the password belongs in a
// password file). No error repeats what was written before an "@".
func ParseBrokerURL(s string) (BrokerURL, error) {
	if shown := RedactBrokerURL(s); shown != s {
		return BrokerURL{}, fmt.Errorf("%q: credentials do not belong in a broker URL (it is shown in logs and the status): set username and password_file instead", shown)
	}
	u, err := url.Parse(s)
	if err != nil {
		return BrokerURL{}, fmt.Errorf("%q is not a broker URL: %v", s, err)
	}
	b := BrokerURL{Scheme: u.Scheme}
	switch u.Scheme {
	case "tcp", "mqtt":
	case "ssl", "tls", "mqtts":
		b.TLS = true
	default:
		return BrokerURL{}, fmt.Errorf("%q: scheme must be %s", s, strings.Join(BrokerSchemes, ", "))
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return BrokerURL{}, fmt.Errorf("%q: give host and port, e.g. tcp://10.43.0.10:1883", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return BrokerURL{}, fmt.Errorf("%q: port %q is not a port number", s, port)
	}
	if u.Path != "" && u.Path != "/" {
		return BrokerURL{}, fmt.Errorf("%q: a broker URL has no path", s)
	}
	b.Host, b.Port = host, n
	return b, nil
}

// Addr is host:port, for dialing.
func (b BrokerURL) Addr() string { return net.JoinHostPort(b.Host, strconv.Itoa(b.Port)) }

// String is scheme://host:port: what logs and the status show.
func (b BrokerURL) String() string { return b.Scheme + "://" + b.Addr() }

// RedactBrokerURL returns s with anything before an "@" in its authority
// (user and password) replaced by "***", and s itself when it has none.
// A string without "://" is treated as all authority up to its first "/",
// so that "user:pw@host:1883" is redacted too.
func RedactBrokerURL(s string) string {
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
		pem, err := os.ReadFile(t.CA)
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
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
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
// meant to hold a password. Errors never contain the file's content.
func ReadPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the mqtt password file: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("reading the mqtt password file %s: it is empty", path)
	}
	return pw, nil
}
