package fleet

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("c.yaml", []byte(""))
	if err != nil || c.Listen != DefaultListen || c.MQTT.TopicPrefix != "edgeheal/v1" || c.MQTT.Broker != "" ||
		c.Web.Auth.UsersFile != DefaultUsersFile || c.Web.Auth.Disabled {
		t.Fatalf("empty file: %+v, %v; want the defaults", c, err)
	}
	c, err = ParseConfig("c.yaml", []byte("mqtt:\n  broker: ssl://mqtt.example.net:8883\n  username: cloud\n  password_file: /etc/p\n  tls: {ca: /etc/ca.pem}\n  share: fleet\nlisten: 0.0.0.0:9470\n"))
	if err != nil || c.MQTT.Broker != "ssl://mqtt.example.net:8883" || c.MQTT.TLS.CA != "/etc/ca.pem" || c.MQTT.Share != "fleet" {
		t.Fatalf("got %+v, %v", c, err)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"colour: red\n", "c.yaml: line 1: colour: unknown key"},
		{"mqtt: {broker: tcp://h}\n", "c.yaml: mqtt.broker: \"tcp://h\": give host and port"},
		{"mqtt: {broker: \"tcp://h:1883\", tls: {ca: /ca}}\n", "mqtt.broker: \"tcp://h:1883\" is plain tcp:// but tls is configured"},
		{"mqtt: {password_file: p}\n", "c.yaml: mqtt.username: empty while password_file is set\nc.yaml: mqtt.password_file: \"p\" is not an absolute path"},
		{"mqtt: {share: a/b}\n", "mqtt.share: \"a/b\""},
		{"mqtt: {tls: {cert: /c}}\n", "mqtt.tls: cert and key go together"},
		{"listen: nine\n", "c.yaml: listen: \"nine\""},
		{"web: {tls: {cert: /c.pem}}\n", "c.yaml: web.tls: cert and key go together"},
		{"web: {auth: {users_file: users}}\n", "c.yaml: web.auth.users_file: \"users\" is not an absolute path"},
		{"web: {auth: {proxy_header: X-Forwarded-User}}\n", "c.yaml: web.auth.proxy_header: proxy_header and trusted_proxies go together"},
		{"web: {auth: {proxy_header: X-User, trusted_proxies: [10.0.0.0/33]}}\n", "web.auth.trusted_proxies: \"10.0.0.0/33\""},
		{"web: {auth: {disabled: true, proxy_header: X-User, trusted_proxies: [127.0.0.1]}}\n", "web.auth.disabled: true while"},
		{"web: {auth: {password: x}}\n", "line 1: password: unknown key"},
	} {
		_, err := ParseConfig("c.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to contain %q", tt.yaml, err, tt.want)
		}
	}
}
