package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/broker"
)

// MQTTConfig is an MQTT broker to probe with CONNECT/CONNACK.
type MQTTConfig struct {
	// Broker is a broker URL as broker.ParseURL reads it.
	Broker       string
	Username     string
	PasswordFile string     // read at every probe (broker.ReadPassword)
	TLS          broker.TLS // used with an ssl://, tls:// or mqtts:// broker
	// ClientID defaults to a random "edgeheal-probe-..." id, so that
	// probes never take over a real client's session.
	ClientID string
	Timeout  time.Duration // bounds DNS, connect, TLS and CONNACK together
}

// DefaultTimeout bounds a probe whose config has no timeout.
const DefaultTimeout = 5 * time.Second

// MQTT opens a connection to the broker from inside ns, sends CONNECT
// (MQTT 3.1.1, clean session) and waits for CONNACK, then disconnects.
// Every network outcome is a Result classified by Classify: a CONNACK with
// return code 4 or 5 is ClassAuth; a packet that breaks MQTT or is larger
// than a CONNACK (checked before anything is allocated for it) closes the
// connection and is ClassProtocol, the broker's fault. An error means the probe could not be
// made (bad broker address, unreadable password or certificate files,
// unusable namespace) and says nothing about the network.
//
// MQTT blocks for at most cfg.Timeout (DefaultTimeout if zero), or until
// ctx is done.
//
// Credentials (a password or a client certificate) go only to an address
// the host resolved: when ns has a resolver of its own (a pod's namespace,
// or DNS servers the pod chose), a broker name is resolved by the agent's
// own resolver first, and a name the host cannot resolve is an error (the
// probe is not made), never a question to the pod's resolver. Without
// credentials the pod's own resolver is used, and measured.
func MQTT(ctx context.Context, ns Netns, cfg MQTTConfig) (Result, error) {
	d, err := newMQTTDial(ns, cfg)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if ns.choosesResolver() && (cfg.PasswordFile != "" || cfg.TLS.Cert != "") {
		if err := d.resolveOnHost(ctx); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	client := mqtt.NewClient(d.options(ctx))
	tok := client.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		d.close() // unblock paho's read of CONNACK; it returns soon after
		<-tok.Done()
	}
	latency := time.Since(start)

	err = d.err(tok.Error())
	var rc byte
	if ct, ok := tok.(*mqtt.ConnectToken); ok {
		rc = ct.ReturnCode()
	}
	switch {
	case err == nil:
		client.Disconnect(100)
	case isNamespaceErr(err):
		return Result{}, err
	case rc == 4 || rc == 5:
		err = &authError{code: rc}
	case ctx.Err() == context.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("waiting for connack: %w (%w)", context.DeadlineExceeded, err)
	}
	r := observed("mqtt", cfg.Broker, start, err)
	r.Latency = latency
	r.DNSLatency = d.dnsLatency
	if rc != 0 && rc < 0x80 {
		r.ReturnCode = int(rc)
	}
	return r, nil
}

// mqttDial is one probe's connection: what it dials and the socket paho
// dials through us.
type mqttDial struct {
	ns                         Netns
	cfg                        MQTTConfig
	hostport, password, client string
	tls                        *tls.Config
	timeout                    time.Duration

	mu         sync.Mutex
	lc         *broker.LimitedConn
	openErr    error
	dnsLatency time.Duration
}

// newMQTTDial reads what the probe needs (the broker URL, the TLS files,
// the password file) through configs' one parser; an error means the
// probe cannot be made.
func newMQTTDial(ns Netns, cfg MQTTConfig) (*mqttDial, error) {
	d := &mqttDial{ns: ns, cfg: cfg, timeout: cfg.Timeout, client: cfg.ClientID}
	if d.timeout <= 0 {
		d.timeout = DefaultTimeout
	}
	addr, err := broker.ParseURL(cfg.Broker)
	if err != nil {
		return nil, err
	}
	d.hostport = addr.Addr()
	if addr.TLS {
		if d.tls, err = cfg.TLS.ClientConfig(addr.Host); err != nil {
			return nil, err
		}
	}
	if cfg.PasswordFile != "" {
		if d.password, err = broker.ReadPassword(cfg.PasswordFile); err != nil {
			return nil, err
		}
	}
	if d.client == "" {
		d.client = "edgeheal-probe-" + randomHex(6)
	}
	return d, nil
}

// resolveOnHost replaces a broker name by the address the agent's own
// resolver gives it.
func (d *mqttDial) resolveOnHost(ctx context.Context) error {
	host, port, err := net.SplitHostPort(d.hostport)
	if err != nil || net.ParseIP(host) != nil {
		return err
	}
	ips, err := hostLookup(ctx, host)
	if err == nil {
		var ip netip.Addr
		if ip, err = pickAddr(ips); err == nil {
			d.hostport = net.JoinHostPort(ip.String(), port)
			return nil
		}
	}
	return fmt.Errorf("resolving %s on the host: the workload's credentials go only to an address the host resolves, never to one from the pod's resolver: %w", host, err)
}

// options are paho's options for the probe. paho 1.5.1 dials through the
// custom open function, so the socket is created in the namespace and the
// dial error reaches us unflattened.
func (d *mqttDial) options(ctx context.Context) *mqtt.ClientOptions {
	open := func(*url.URL, mqtt.ClientOptions) (net.Conn, error) {
		c, err := openConn(ctx, d.ns, d.hostport, d.tls, &d.dnsLatency)
		var lc *broker.LimitedConn
		if err == nil {
			// The probe takes a CONNACK and nothing else of size: a
			// broker that announces more is refused before paho
			// allocates it, and a malformed CONNACK is never ok.
			lc = broker.LimitPackets(c, broker.PacketLimits{Max: probeMaxPacket, CleanSession: true})
		}
		d.mu.Lock()
		d.lc, d.openErr = lc, err
		d.mu.Unlock()
		if lc == nil {
			return nil, err
		}
		return lc, nil
	}
	return mqtt.NewClientOptions().
		AddBroker("tcp://" + d.hostport). // the scheme is ours to handle in open
		SetClientID(d.client).
		SetUsername(d.cfg.Username).
		SetPassword(d.password).
		SetCleanSession(true).
		// paho retries with MQTT 3.1 and doubles the wait unless the
		// version is explicit (measured with paho 1.5.1).
		SetProtocolVersion(4).
		SetConnectTimeout(d.timeout).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetKeepAlive(0).
		SetCustomOpenConnectionFn(open)
}

// close closes the probe's socket, if it has one.
func (d *mqttDial) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lc != nil {
		d.lc.Close()
	}
}

// err is the probe's outcome: the dial's own error wins over paho's, and a
// packet that broke MQTT wins over what paho made of it.
func (d *mqttDial) err(pahoErr error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.openErr != nil {
		return d.openErr
	}
	if d.lc != nil {
		if err := d.lc.Err(); err != nil {
			return err
		}
	}
	return pahoErr
}

// probeMaxPacket is the largest PUBLISH or SUBACK the probe takes: it
// subscribes to nothing, so none should come at all.
const probeMaxPacket = 64

// openConn dials hostport inside ns and, with tlsCfg, completes the TLS
// handshake, all bounded by ctx.
func openConn(ctx context.Context, ns Netns, hostport string, tlsCfg *tls.Config, dnsLatency *time.Duration) (net.Conn, error) {
	target, err := resolveIn(ctx, ns, hostport, dnsLatency)
	if err != nil {
		return nil, err
	}
	c, err := ns.dialIP(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		return c, nil
	}
	tc := tls.Client(c, tlsCfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tls handshake: %w: %w", ErrHandshakeStalled, ctx.Err())
		}
		return nil, &tlsError{err: err}
	}
	return tc, nil
}
