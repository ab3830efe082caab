package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/wire"
)

// DefaultConfigPath is where edgeheal-fleet reads its configuration.
const DefaultConfigPath = "/etc/edgeheal-fleet/config.yaml"

// DefaultListen is the address of the page and /metrics.
const DefaultListen = "127.0.0.1:9470"

// Config is edgeheal-fleet's configuration: the broker, with the keys (and
// the parsing of URLs, TLS and password files, package broker) of the
// agent's report.mqtt, plus the shared subscription group, and where to
// serve.
type Config struct {
	MQTT   MQTT   `yaml:"mqtt"`
	Listen string `yaml:"listen"`
	Web    Web    `yaml:"web"`
}

// DefaultUsersFile is where the console's users and tokens are read
// unless web.auth.users_file says otherwise.
const DefaultUsersFile = "/etc/edgeheal-fleet/users"

// Web is how the console is served: TLS when given a certificate, and
// who may see it.
type Web struct {
	TLS  WebTLS `yaml:"tls"`
	Auth Auth   `yaml:"auth"`
}

// WebTLS is the console's certificate and key (PEM files); both empty:
// plain HTTP.
type WebTLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Auth says who may see the console. It is on unless Disabled: every
// request but /healthz needs a user of UsersFile (a password, HTTP
// basic authentication, or a bearer token) or, from a TrustedProxies
// address, a non-empty ProxyHeader (a reverse proxy that authenticated
// the user, such as oauth2-proxy).
type Auth struct {
	UsersFile      string   `yaml:"users_file"`
	ProxyHeader    string   `yaml:"proxy_header"`
	TrustedProxies []string `yaml:"trusted_proxies"`
	Disabled       bool     `yaml:"disabled"`
}

// MQTT is the broker connection.
type MQTT struct {
	Broker       string     `yaml:"broker"` // empty: not configured yet
	ClientID     string     `yaml:"client_id"`
	TopicPrefix  string     `yaml:"topic_prefix"`
	Username     string     `yaml:"username"`
	PasswordFile string     `yaml:"password_file"`
	TLS          broker.TLS `yaml:"tls"`
	// Share is an MQTT shared subscription group for the events: several
	// instances with the same group each get a share of them. Empty: this
	// instance gets every event.
	Share string `yaml:"share"`
}

// LoadConfig reads and validates a configuration file strictly (unknown
// keys are errors); every problem names the file and the key. Missing
// keys take their defaults: an empty broker means not configured yet.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading the configuration: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes and validates configuration bytes; name is used in
// errors.
func ParseConfig(name string, data []byte) (Config, error) {
	c := Config{MQTT: MQTT{TopicPrefix: wire.DefaultTopicPrefix}, Listen: DefaultListen, Web: Web{Auth: Auth{UsersFile: DefaultUsersFile}}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, yamlError(name, err)
	}
	var problems []error
	bad := func(key, format string, args ...any) {
		problems = append(problems, fmt.Errorf("%s: %s: %s", name, key, fmt.Sprintf(format, args...)))
	}
	m := c.MQTT
	if m.Broker != "" {
		if b, err := broker.ParseURL(m.Broker); err != nil {
			bad("mqtt.broker", "%v", err)
		} else if !b.TLS && m.TLS.Enabled() {
			bad("mqtt.broker", "%q is plain %s:// but tls is configured: use ssl://, tls:// or mqtts://", m.Broker, b.Scheme)
		}
	}
	if m.TopicPrefix == "" || strings.ContainsAny(m.TopicPrefix, "+#") || strings.HasPrefix(m.TopicPrefix, "/") || strings.HasSuffix(m.TopicPrefix, "/") {
		bad("mqtt.topic_prefix", "%q: not empty, no wildcards (+ #) and no leading or trailing '/'", m.TopicPrefix)
	}
	if strings.ContainsAny(m.ClientID, "+#/") {
		bad("mqtt.client_id", "%q: no '/', '+' or '#'", m.ClientID)
	}
	if strings.ContainsAny(m.Share, "+#/") {
		bad("mqtt.share", "%q: a group name has no '/', '+' or '#'", m.Share)
	}
	if m.PasswordFile != "" && m.Username == "" {
		bad("mqtt.username", "empty while password_file is set")
	}
	if (m.TLS.Cert == "") != (m.TLS.Key == "") {
		bad("mqtt.tls", "cert and key go together: set both for mutual TLS, or neither")
	}
	for _, f := range [][2]string{{"password_file", m.PasswordFile}, {"tls.ca", m.TLS.CA}, {"tls.cert", m.TLS.Cert}, {"tls.key", m.TLS.Key}} {
		if f[1] != "" && !filepath.IsAbs(f[1]) {
			bad("mqtt."+f[0], "%q is not an absolute path", f[1])
		}
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		bad("listen", "%q: write host:port, e.g. %s", c.Listen, DefaultListen)
	}
	checkWeb(c.Web, bad)
	if len(problems) > 0 {
		return Config{}, errors.Join(problems...)
	}
	return c, nil
}

// checkWeb validates the web section.
func checkWeb(w Web, bad func(key, format string, args ...any)) {
	if (w.TLS.Cert == "") != (w.TLS.Key == "") {
		bad("web.tls", "cert and key go together: set both to serve HTTPS, or neither")
	}
	a := w.Auth
	for _, f := range [][2]string{{"web.tls.cert", w.TLS.Cert}, {"web.tls.key", w.TLS.Key}, {"web.auth.users_file", a.UsersFile}} {
		if f[1] != "" && !filepath.IsAbs(f[1]) {
			bad(f[0], "%q is not an absolute path", f[1])
		}
	}
	if a.Disabled && (a.ProxyHeader != "" || len(a.TrustedProxies) > 0) {
		bad("web.auth.disabled", "true while proxy_header or trusted_proxies is set: choose one")
	}
	if (a.ProxyHeader == "") != (len(a.TrustedProxies) == 0) {
		bad("web.auth.proxy_header", "proxy_header and trusted_proxies go together: the header is believed only from the proxies' addresses")
	}
	if a.ProxyHeader != "" && strings.ContainsAny(a.ProxyHeader, " :\t\r\n") {
		bad("web.auth.proxy_header", "%q is not a header name", a.ProxyHeader)
	}
	for _, p := range a.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				bad("web.auth.trusted_proxies", "%q is neither an address nor a prefix (127.0.0.1, 10.0.0.0/8)", p)
			}
		}
	}
}

var unknownKey = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)

// yamlError rewrites the YAML decoder's error as file: line N: problem,
// one line each.
func yamlError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	var out []string
	for _, line := range strings.Split(msg, "\n") {
		line = unknownKey.ReplaceAllString(strings.TrimSpace(line), "line $1: $2: unknown key (known: mqtt, listen, web; under mqtt: broker, client_id, topic_prefix, username, password_file, tls, share; under web: tls (cert, key), auth (users_file, proxy_header, trusted_proxies, disabled))")
		out = append(out, name+": "+line)
	}
	return errors.New(strings.Join(out, "\n"))
}
