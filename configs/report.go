package configs

import (
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/broker"
)

// Reconnect is how the MQTT publisher returns to its broker after a
// connection was lost or could not be made: a cheap TCP check of the
// broker's port every ProbeInterval while disconnected, the full connect
// ConnectJitter (at most, drawn at random) after the broker answers, an
// exponential backoff from MinDelay to MaxDelay for full connects that
// fail or connections that do not last StableAfter, and StartJitter before
// the first connect at start. docs/operations/reporting.md, "Reconnects", says why
// the defaults are what they are.
type Reconnect struct {
	ProbeInterval Duration `yaml:"probe_interval"`
	ConnectJitter Duration `yaml:"connect_jitter"`
	MinDelay      Duration `yaml:"min_delay"`
	MaxDelay      Duration `yaml:"max_delay"`
	StableAfter   Duration `yaml:"stable_after"`
	StartJitter   Duration `yaml:"start_jitter"`
}

// reportMQTT checks what report.mqtt adds to a broker's address and
// credentials: no password over a plaintext transport unless the config
// says so, and reconnect limits that make sense together. (A client key
// over plaintext is already refused: TLS settings with a plain URL are.)
func (v *validator) reportMQTT(p string, m ReportMQTT) {
	if m.Broker != "" && m.PasswordFile != "" && !m.InsecurePlaintext {
		if b, err := broker.ParseURL(m.Broker); err == nil && !b.TLS {
			v.add(p+".password_file", "the password would cross the network in clear: %s is plain %s://; use ssl://, tls:// or mqtts://, or set %s.insecure_plaintext: true to accept that",
				b, b.Scheme, p)
		}
	}
	r := m.Reconnect
	rp := p + ".reconnect"
	v.durRange(rp+".probe_interval", r.ProbeInterval, 100*time.Millisecond, 10*time.Minute)
	v.durRange(rp+".connect_jitter", r.ConnectJitter, 0, 10*time.Minute)
	v.durRange(rp+".min_delay", r.MinDelay, 100*time.Millisecond, 10*time.Minute)
	v.durRange(rp+".max_delay", r.MaxDelay, 100*time.Millisecond, time.Hour)
	if r.MaxDelay < r.MinDelay {
		v.add(rp+".max_delay", "%s is below min_delay %s", fmtDur(r.MaxDelay), fmtDur(r.MinDelay))
	}
	v.durRange(rp+".stable_after", r.StableAfter, 0, time.Hour)
	v.durRange(rp+".start_jitter", r.StartJitter, 0, 10*time.Minute)
}

// PlaintextWarning is what the agent logs at every start when the config
// accepts a password over a plain transport, or "" when it does not.
func (m ReportMQTT) PlaintextWarning() string {
	if m.Broker == "" || m.PasswordFile == "" || !m.InsecurePlaintext {
		return ""
	}
	b, err := broker.ParseURL(m.Broker)
	if err != nil || b.TLS {
		return ""
	}
	return fmt.Sprintf("report.mqtt.insecure_plaintext is true: the MQTT password crosses the network in clear to %s", b)
}

// SecretFile is a configured file that holds a secret, and its key path.
type SecretFile struct {
	Key, Path string
}

// SecretFiles lists every password and client key file of the config,
// for the agent to check their modes (CheckSecretFile) at start.
func (c *Config) SecretFiles() []SecretFile {
	var out []SecretFile
	add := func(key, path string) {
		if path != "" {
			out = append(out, SecretFile{Key: key, Path: path})
		}
	}
	add("report.mqtt.password_file", c.Report.MQTT.PasswordFile)
	add("report.mqtt.tls.key", c.Report.MQTT.TLS.Key)
	for i, w := range c.Workloads {
		add(fmt.Sprintf("workloads[%d].mqtt.password_file", i), w.MQTT.PasswordFile)
		add(fmt.Sprintf("workloads[%d].mqtt.tls.key", i), w.MQTT.TLS.Key)
	}
	return out
}
