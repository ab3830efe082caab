package probes

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// TestMQTTClassifiesAgainstMosquitto probes a real mosquitto on loopback
// and checks each failure lands in its class.
func TestMQTTClassifiesAgainstMosquitto(t *testing.T) {
	b := startMosquitto(t)
	wrong := filepath.Join(t.TempDir(), "wrong")
	writeFile(t, wrong, "wrong-password\n")
	closed := "127.0.0.1:" + strconv.Itoa(freePort(t))
	silent := silentListener(t, Netns{})
	dns := startDNS(t, Netns{}, map[string][4]byte{"broker.test.": {127, 0, 0, 1}})
	port := func(a string) string { return a[len("127.0.0.1:"):] }
	const bound = 700 * time.Millisecond

	tests := []struct {
		name      string
		ns        Netns
		cfg       MQTTConfig
		want      Class
		wantRC    int
		wantDNSMs bool
	}{
		{name: "the right password is accepted", cfg: MQTTConfig{Broker: "tcp://" + b.PlainAddr, Username: b.user, PasswordFile: b.passwd}, want: ClassOK},
		{name: "a wrong password is auth with the connack code", cfg: MQTTConfig{Broker: "tcp://" + b.PlainAddr, Username: b.user, PasswordFile: wrong}, want: ClassAuth, wantRC: 5},
		{name: "no credentials is auth", cfg: MQTTConfig{Broker: "tcp://" + b.PlainAddr}, want: ClassAuth, wantRC: 5},
		{name: "a closed port is refused", cfg: MQTTConfig{Broker: "tcp://" + closed}, want: ClassRefused},
		{name: "a broker that never answers connect is a timeout", cfg: MQTTConfig{Broker: "tcp://" + silent, Timeout: bound}, want: ClassTimeout},
		{name: "tls with the right ca is accepted", cfg: MQTTConfig{Broker: "ssl://" + b.TLSAddr, Username: b.user, PasswordFile: b.passwd, TLS: configs.TLS{CA: b.PKI.CAFile}}, want: ClassOK},
		{name: "tls with a wrong ca is tls", cfg: MQTTConfig{Broker: "ssl://" + b.TLSAddr, Username: b.user, PasswordFile: b.passwd, TLS: configs.TLS{CA: b.PKI.OtherCA}}, want: ClassTLS},
		{name: "tls with a wrong server name is tls", cfg: MQTTConfig{Broker: "ssl://" + b.TLSAddr, Username: b.user, PasswordFile: b.passwd, TLS: configs.TLS{CA: b.PKI.CAFile, ServerName: "other.test"}}, want: ClassTLS},
		{name: "plain mqtt to the tls port is not ok", cfg: MQTTConfig{Broker: "tcp://" + b.TLSAddr, Username: b.user, PasswordFile: b.passwd, Timeout: bound}, want: ClassFailed},
		// Without credentials the namespace's own resolver is used (with
		// them, the host's: TestMQTTSendsCredentialsOnlyToAnAddressTheHostResolved).
		{name: "a name resolved by the namespace's dns server is used", ns: Netns{DNSServers: []string{dns}}, cfg: MQTTConfig{Broker: "ssl://broker.test:" + port(b.TLSAddr), TLS: configs.TLS{CA: b.PKI.CAFile}}, want: ClassAuth, wantRC: 5, wantDNSMs: true},
		{name: "a name that does not resolve is dns", ns: Netns{DNSServers: []string{dns}}, cfg: MQTTConfig{Broker: "tcp://nowhere.test:1883"}, want: ClassDNS, wantDNSMs: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Timeout == 0 {
				tt.cfg.Timeout = 3 * time.Second
			}
			start := time.Now()
			got, err := MQTT(context.Background(), tt.ns, tt.cfg)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("MQTT: %v", err)
			}
			if got.Class != tt.want || got.ReturnCode != tt.wantRC {
				t.Errorf("got class %q return code %d (detail %q), want %q %d", got.Class, got.ReturnCode, got.Detail, tt.want, tt.wantRC)
			}
			if got.Latency <= 0 {
				t.Errorf("latency %v, want > 0", got.Latency)
			}
			if tt.wantDNSMs != (got.DNSLatency > 0) {
				t.Errorf("dns latency %v, want it set: %v", got.DNSLatency, tt.wantDNSMs)
			}
			// The bound is a contract, not a performance figure: a probe
			// must give up at its timeout (plus scheduling slack).
			if took > tt.cfg.Timeout+2*time.Second {
				t.Errorf("probe took %v, bound %v", took, tt.cfg.Timeout)
			}
		})
	}
}

// TestMQTTBrokerStoppedIsRefused shows the broker-down observation the
// diagnosis relies on.
func TestMQTTBrokerStoppedIsRefused(t *testing.T) {
	b := startMosquitto(t)
	cfg := MQTTConfig{Broker: b.PlainURL(), Username: b.user, PasswordFile: b.passwd, Timeout: 2 * time.Second}
	if r, err := MQTT(context.Background(), Netns{}, cfg); err != nil || r.Class != ClassOK {
		t.Fatalf("before stop: %+v, %v", r, err)
	}
	b.Stop()
	r, err := MQTT(context.Background(), Netns{}, cfg)
	if err != nil || r.Class != ClassRefused {
		t.Fatalf("after stop: got %+v, %v; want class refused", r, err)
	}
}

func TestMQTTCannotProbeIsAnError(t *testing.T) {
	tests := []struct {
		name   string
		ns     Netns
		cfg    MQTTConfig
		wantIs error
	}{
		{name: "a missing password file", cfg: MQTTConfig{Broker: "tcp://127.0.0.1:1", PasswordFile: "/nonexistent/pw"}, wantIs: os.ErrNotExist},
		{name: "a missing ca file", cfg: MQTTConfig{Broker: "ssl://127.0.0.1:1", TLS: configs.TLS{CA: "/nonexistent/ca"}}, wantIs: os.ErrNotExist},
		{name: "a namespace that is gone", ns: Netns{Path: "/nonexistent/ns/net"}, cfg: MQTTConfig{Broker: "tcp://127.0.0.1:1"}, wantIs: os.ErrNotExist},
		{name: "a broker address without a port", cfg: MQTTConfig{Broker: "127.0.0.1"}},
		{name: "an unknown scheme", cfg: MQTTConfig{Broker: "ws://127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := MQTT(context.Background(), tt.ns, tt.cfg)
			if err == nil {
				t.Fatalf("got result %+v and no error", r)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v does not match %v", err, tt.wantIs)
			}
		})
	}
}

// BenchmarkLabMQTTFromNamespace measures one CONNECT/CONNACK probe from
// inside a namespace to a mosquitto in it (root).
func BenchmarkLabMQTTFromNamespace(b *testing.B) {
	testsupport.RequireRoot(b, "a network namespace")
	ns := newNetns(b)
	br := startMosquittoIn(b, ns)
	cfg := MQTTConfig{Broker: br.PlainURL(), Username: br.user, PasswordFile: br.passwd, Timeout: 2 * time.Second}
	for b.Loop() {
		r, err := MQTT(context.Background(), ns, cfg)
		if err != nil || r.Class != ClassOK {
			b.Fatalf("%+v, %v", r, err)
		}
	}
}

// BenchmarkLabNetnsDo measures entering a namespace and coming back.
func BenchmarkLabNetnsDo(b *testing.B) {
	testsupport.RequireRoot(b, "a network namespace")
	ns := newNetns(b)
	for b.Loop() {
		if err := ns.Do(func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// A TLS handshake that gets no answer after TCP connected (the ClientHello
// lost on a path that drops full-size packets) is a timeout marked as
// stalled; a refused connection or one that answers is not.
func TestMQTTMarksATLSHandshakeThatStalledAfterConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // reads nothing, answers nothing
		}
	}()
	r, err := MQTT(context.Background(), Netns{}, MQTTConfig{Broker: "ssl://" + ln.Addr().String(), Timeout: 300 * time.Millisecond})
	if err != nil || r.Class != ClassTimeout || !r.HandshakeStalled {
		t.Errorf("= %+v, %v; want a timeout marked handshake_stalled", r, err)
	}
	r, err = MQTT(context.Background(), Netns{}, MQTTConfig{Broker: "ssl://127.0.0.1:1", Timeout: 300 * time.Millisecond})
	if err != nil || r.HandshakeStalled {
		t.Errorf("a refused connection = %+v, %v; not stalled", r, err)
	}
}
