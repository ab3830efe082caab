package probes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/broker"
)

// Class is what a workload probe observed, in the words an operator uses.
type Class string

// The classes a probe result can have. Every failure a probe observes maps
// to exactly one of them; ClassFailed is the rest (connection reset, a
// broker that closes the connection, an unexpected packet).
const (
	ClassOK      Class = "ok"
	ClassDNS     Class = "dns"      // the broker's name did not resolve
	ClassRefused Class = "refused"  // TCP RST: nothing listens there
	ClassTimeout Class = "timeout"  // no answer within the bound: blackholed, dropped
	ClassTLS     Class = "tls"      // handshake or certificate verification failed
	ClassAuth    Class = "auth"     // CONNACK refused the credentials (return code 4 or 5)
	ClassNoRoute Class = "no-route" // no route to the host or network
	ClassNoPod   Class = "no-pod"   // no ready pod sandbox matches: nothing to probe
	// ClassProtocol: what answered broke MQTT (a packet far larger than
	// a CONNACK, a malformed CONNACK): the broker's fault, not the path's.
	ClassProtocol Class = "protocol"
	ClassFailed   Class = "failed" // any other observed failure
)

// Result is one observation made by a probe. A Result describes what the
// network did; a probe that could not be made at all (a missing namespace
// file, an unreadable password file, a malformed address) returns an error
// instead, and callers must not act on it.
type Result struct {
	Probe   string        `json:"probe"`  // "mqtt", "tcp", "dns"
	Target  string        `json:"target"` // address probed
	Class   Class         `json:"class"`
	Latency time.Duration `json:"-"` // until the answer (CONNACK, connect, lookup); also set on failure
	// DNSLatency is the time spent resolving a host name (zero for an IP).
	DNSLatency time.Duration `json:"-"`
	// ReturnCode is the CONNACK return code, for an MQTT probe that got one.
	ReturnCode int `json:"return_code,omitempty"`
	// HandshakeStalled: TCP connected, then the TLS handshake got no answer
	// and no alert before the timeout (Class is timeout). Its first
	// full-size packet, the ClientHello, is the likely loss: the mark of a
	// path that silently drops what is larger than its MTU.
	HandshakeStalled bool   `json:"handshake_stalled,omitempty"`
	Detail           string `json:"detail,omitempty"` // the error text of a failure
}

// OK reports whether the probe succeeded.
func (r Result) OK() bool { return r.Class == ClassOK }

// MarshalJSON writes r with its durations in seconds (latency_seconds,
// dns_latency_seconds), as every other duration edgeheal reports.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result // without this method
	return json.Marshal(struct {
		plain
		LatencySeconds    float64 `json:"latency_seconds"`
		DNSLatencySeconds float64 `json:"dns_latency_seconds,omitempty"`
	}{plain(r), r.Latency.Seconds(), r.DNSLatency.Seconds()})
}

// ErrHandshakeStalled marks (wrapped) a TLS handshake that got no answer
// and no alert after TCP connected, within the probe's timeout.
var ErrHandshakeStalled = errors.New("no answer after TCP connected, and no alert")

// ErrNoPod is returned (wrapped) by a Resolver when no ready pod sandbox
// matches the selector. It is an observation, not a failure to observe:
// Classify maps it to ClassNoPod.
var ErrNoPod = errors.New("no ready pod sandbox matches")

// tlsError marks an error from the TLS handshake, so that Classify can tell
// it from the TCP errors underneath.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "tls handshake: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// authError carries a CONNACK return code that refused the connection.
type authError struct{ code byte }

func (e *authError) Error() string {
	switch e.code {
	case 4:
		return "connack: bad user name or password (return code 4)"
	case 5:
		return "connack: not authorised (return code 5)"
	}
	return "connack: refused"
}

// Classify maps an error observed by a probe to its Class. nil is ClassOK.
// The order matters: a timeout during a TLS handshake is a timeout (the path
// is dark), and a name that did not resolve is dns even if the lookup timed
// out.
func Classify(err error) Class {
	if err == nil {
		return ClassOK
	}
	var dnsErr *net.DNSError
	var authErr *authError
	var netErr net.Error
	var packetErr *broker.PacketError
	switch {
	case errors.Is(err, ErrNoPod):
		return ClassNoPod
	case errors.As(err, &packetErr):
		return ClassProtocol
	case errors.As(err, &dnsErr):
		return ClassDNS
	case errors.As(err, &authErr):
		return ClassAuth
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return ClassNoRoute
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ETIMEDOUT), errors.As(err, &netErr) && netErr.Timeout():
		return ClassTimeout
	case isTLS(err):
		return ClassTLS
	}
	return ClassFailed
}

func isTLS(err error) bool {
	var te *tlsError
	var rh tls.RecordHeaderError
	var ae tls.AlertError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &te) || errors.As(err, &rh) || errors.As(err, &ae) ||
		errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

// observed builds the Result of a probe that ran, from its error.
func observed(probe, target string, start time.Time, err error) Result {
	r := Result{Probe: probe, Target: target, Class: Classify(err), Latency: time.Since(start)}
	if err != nil {
		r.Detail = err.Error()
	}
	var ae *authError
	if errors.As(err, &ae) {
		r.ReturnCode = int(ae.code)
	}
	r.HandshakeStalled = errors.Is(err, ErrHandshakeStalled)
	return r
}
