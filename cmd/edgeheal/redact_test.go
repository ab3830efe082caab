package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestTheLogNeverShowsASecret(t *testing.T) {
	const pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKeyMaterialThatMustNotLeak\n-----END EC PRIVATE KEY-----"
	var buf bytes.Buffer
	log := slog.New(redacting(slog.NewTextHandler(&buf, nil))).With("broker", "ssl://node:hunter2@cloud:8883")
	log.Info("connecting to tcp://user:hunter2@cloud:1883 failed",
		"password", "hunter2", "mqtt_token", "tok-123", "password_file", "/etc/edgeheal/mqtt.password",
		"err", errors.New("tls: bad key "+pem),
		slog.Group("tls", "private_key", "raw", "cert", "/etc/edgeheal/c.pem"),
		"target", "wg0")
	out := buf.String()
	for _, secret := range []string{"hunter2", "tok-123", "KeyMaterialThatMustNotLeak", "raw"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
	for _, kept := range []string{"ssl://***@cloud:8883", "tcp://***@cloud:1883", "password_file=/etc/edgeheal/mqtt.password",
		"[redacted private key]", "tls.cert=/etc/edgeheal/c.pem", "target=wg0", "password=[redacted]"} {
		if !strings.Contains(out, kept) {
			t.Errorf("the log lacks %q:\n%s", kept, out)
		}
	}
}
