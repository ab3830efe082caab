package fleet

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("c.yaml", []byte(""))
	if err != nil || c.Listen != DefaultListen || c.MQTT.TopicPrefix != "edgeheal/v1" || c.MQTT.Broker != "" {
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
	} {
		_, err := ParseConfig("c.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to contain %q", tt.yaml, err, tt.want)
		}
	}
}
