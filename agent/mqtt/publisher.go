// Package mqtt reports the node to the cloud over MQTT 3.1.1: a retained
// status with a Last Will, and the events of the outbox, in order, each
// acked in the outbox only after the broker's PUBACK. It also defines
// those payloads, which the cloud side reads.
package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// LinkWatcher is the part of the OS backend the publisher subscribes to:
// a link or default-route change is a reason to check the broker at once
// (probes.LinkWatcher; core.OS.Links).
type LinkWatcher interface {
	Subscribe(ctx context.Context) (<-chan probes.LinkEvent, error)
}

// Options configure a Publisher. Config, Node, Outbox and Session are
// required; zero durations take the documented defaults, and so do zero
// ProbeInterval, MinDelay and MaxDelay in Config.Reconnect (a zero
// ConnectJitter, StableAfter or StartJitter is none: the config's
// defaults set them).
type Options struct {
	Config  configs.ReportMQTT
	Node    configs.Node
	Version string // agent version, in every status
	Outbox  *outbox.Outbox
	Session *Session
	Logger  *slog.Logger
	// Emit receives the publisher's own events (the broker keeps closing
	// the connections it accepts); nil: none.
	Emit core.Emit
	// History, if set, is published retained on <prefix>/<node>/history.
	History HistorySource
	// Links, if set, is watched while the publisher is disconnected: a
	// change of a link or a default route makes it check the broker at once.
	Links LinkWatcher
	// Dial opens the TCP connections of checks and connects; nil: a
	// net.Dialer over the host network (proxy variables are ignored).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	// MinBackoff and MaxBackoff, if set, override Config.Reconnect's
	// MinDelay and MaxDelay: the names of those limits before they were
	// config keys, kept for the callers that set them.
	MinBackoff, MaxBackoff time.Duration

	Heartbeat   time.Duration // status re-published this often; default 5m
	DialTimeout time.Duration // TCP+TLS dial and CONNACK wait; default 10s
	AckTimeout  time.Duration // PUBACK wait per publish; default 30s
	Window      int           // events in flight at once; default 16
}

// HistorySource is the node's history as the publisher publishes it
// (history.Book).
type HistorySource interface {
	// Published is the history to publish: bounded, a few KiB.
	Published(now time.Time) wire.History
	// Revision counts the changes of incidents (opened, changed, closed)
	// and, in closed, their closes alone.
	Revision() (incidents, closed uint64)
}

// Publisher reports to the cloud broker over the host network (it dials
// from the namespace of the process, never through the overlay the agent
// repairs):
//
//   - <prefix>/<node>/status, retained, QoS 1: a wire.Status, published on
//     every connect, on every change and every Heartbeat;
//   - the Last Will, retained on the same topic: a wire.Status "lost" with
//     its connection's session and the node's identity (node, site,
//     version, config revision as of the connect);
//   - <prefix>/<node>/history, retained, QoS 1, with Options.History: a
//     wire.History, published on every connect, at once when an incident
//     closes, at most once a minute when incidents otherwise change, and
//     every hour for the seconds that passed;
//   - <prefix>/<node>/event, QoS 1, not retained: one wire.EventMessage per queued
//     outbox event, in the outbox's order, each acked in the outbox only
//     after its PUBACK and only when every event before it was acked, so
//     that a connection lost mid-window sends the rest again in order.
//
// Every connection attempt is a new paho client: paho fixes the Will when a
// client is made, and the Will must carry the session of its own
// connection. So paho's auto-reconnect and connect-retry are off and the
// Publisher reconnects itself (see retry, and docs/operations/reporting.md,
// "Reconnects"): while disconnected it checks every few seconds whether
// the broker's port answers a TCP connect, and on a link change or TryNow
// at once; the full connect follows a short random delay once it does,
// never sooner than the backoff allows.
//
// It is an core.Component. Nothing the agent's loop calls (SetChecks,
// SetConfigRevision, TryNow, Outbox.Append) waits for the broker. The
// password is read from its file at each attempt and never logged or
// reported; the broker is shown as scheme://host:port only.
type Publisher struct {
	opts      Options
	log       *slog.Logger
	broker    broker.URL
	reconnect configs.Reconnect
	prefix    string
	clientID  string

	mu       sync.Mutex
	checks   []wire.Check
	revision string
	lastErr  string
	waiting  string // while disconnected: what the publisher waits for
	progress time.Time
	retry    *retry
	kicked   kicked
	broken   bool // the broker broke MQTT since the last good connect

	changed   chan struct{}
	tryNow    chan struct{}
	refresh   chan string // Refresh's reason, taken by the connection it ends
	connected atomic.Bool
	session   atomic.Uint64
}

var _ core.Component = (*Publisher)(nil)

// NewPublisher checks the options and returns a Publisher that is not
// running. Files (TLS, password) are read when it connects, not here: a
// file that is missing is a state of the running component, reported and
// retried, not a reason for the agent not to start.
func NewPublisher(opts Options) (*Publisher, error) {
	if opts.Config.Broker == "" {
		return nil, errors.New("creating the mqtt publisher: no broker configured")
	}
	addr, err := broker.ParseURL(opts.Config.Broker)
	if err != nil {
		return nil, fmt.Errorf("creating the mqtt publisher: report.mqtt.broker: %w", err)
	}
	if opts.Outbox == nil || opts.Session == nil {
		return nil, errors.New("creating the mqtt publisher: outbox and session are required")
	}
	if opts.Node.Name == "" {
		return nil, errors.New("creating the mqtt publisher: node name is empty")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Emit == nil {
		opts.Emit = func(core.Event) {}
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.Heartbeat, 5*time.Minute)
	def(&opts.DialTimeout, 10*time.Second)
	def(&opts.AckTimeout, 30*time.Second)
	if opts.Window <= 0 {
		opts.Window = 16
	}
	rc := opts.Config.Reconnect
	if opts.MinBackoff > 0 {
		rc.MinDelay = configs.Duration(opts.MinBackoff)
	}
	if opts.MaxBackoff > 0 {
		rc.MaxDelay = configs.Duration(opts.MaxBackoff)
	}
	p := &Publisher{
		opts:      opts,
		broker:    addr,
		reconnect: withDefaults(rc),
		prefix:    strings.TrimRight(opts.Config.TopicPrefix, "/"),
		clientID:  opts.Config.ClientID,
		changed:   make(chan struct{}, 1),
		tryNow:    make(chan struct{}, 1),
		refresh:   make(chan string, 1),
	}
	p.retry = newRetry(p.reconnect)
	if p.prefix == "" {
		p.prefix = wire.DefaultTopicPrefix
	}
	if p.clientID == "" {
		p.clientID = "edgeheal-" + opts.Node.Name
	}
	p.log = opts.Logger.With("broker", addr.String(), "client_id", p.clientID)
	p.session.Store(opts.Session.Current())
	return p, nil
}

// StatusTopic is <prefix>/<node>/status.
func (p *Publisher) StatusTopic() string {
	return wire.Topic(p.prefix, p.opts.Node.Name, wire.TopicStatus)
}

// HistoryTopic is <prefix>/<node>/history.
func (p *Publisher) HistoryTopic() string {
	return wire.Topic(p.prefix, p.opts.Node.Name, wire.TopicHistory)
}

// EventTopic is <prefix>/<node>/event.
func (p *Publisher) EventTopic() string {
	return wire.Topic(p.prefix, p.opts.Node.Name, wire.TopicEvent)
}

// SetChecks replaces the checks shown in the status. It never blocks; the
// status is re-published when its content changed.
func (p *Publisher) SetChecks(checks []wire.Check) {
	p.mu.Lock()
	p.checks = append([]wire.Check(nil), checks...)
	p.mu.Unlock()
	poke(p.changed)
}

// SetConfigRevision sets the config revision shown in the status. It never
// blocks.
func (p *Publisher) SetConfigRevision(rev string) {
	p.mu.Lock()
	p.revision = rev
	p.mu.Unlock()
	poke(p.changed)
}

// TryNow asks a disconnected publisher to check the broker at once rather
// than at its next check: the node has a reason to think the path is back
// (a tunnel recovered, an uplink returned). The full connect still waits
// for the backoff. It never blocks; connected, it does nothing.
func (p *Publisher) TryNow() {
	if !p.connected.Load() {
		poke(p.tryNow)
	}
}

// Refresh ends the broker connection, if there is one, and connects again
// at once: the path under it changed in a way an open connection cannot
// follow. A path-MTU repair that clamps the TCP MSS (OutgrowsTheConnection)
// helps new connections only; one opened before it keeps sending segments
// sized for the larger path, which it silently loses, until its PUBACK
// wait runs out. It never blocks; disconnected, it does nothing.
func (p *Publisher) Refresh(reason string) {
	if !p.connected.Load() {
		return
	}
	select {
	case p.refresh <- reason:
	default:
	}
}

// errRefresh marks a connection the publisher ended for Refresh.
var errRefresh = errors.New("reconnecting")

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Connected reports whether a broker connection is up.
func (p *Publisher) Connected() bool { return p.connected.Load() }

// Info reports the connection state, as /v1/status shows it (never
// credentials).
func (p *Publisher) Info() wire.MQTTInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return wire.MQTTInfo{
		Broker: p.broker.String(), ClientID: p.clientID,
		Connected: p.connected.Load(), Session: p.session.Load(), LastError: p.lastErr,
	}
}

// Name implements core.Component.
func (p *Publisher) Name() string { return "mqtt" }

// progressDeadline is how long the publisher may go without passing
// through its loop: the longest legitimate wait (a connect and a window of
// PUBACKs, or a start jitter) with room to spare. Waiting for the broker
// passes through the loop at every check.
func (p *Publisher) progressDeadline() time.Duration {
	return p.reconnect.StartJitter.D() + p.reconnect.ConnectJitter.D() + p.reconnect.ProbeInterval.D() +
		4*p.opts.DialTimeout + 2*p.opts.AckTimeout + time.Minute
}

// Health implements core.Component. Being disconnected is not a fault of
// the node (the broker or the path to it is down) and is only detail; a
// session counter that is not kept on disk is, and so is a broker that
// closes every connection it accepts (a duplicate client id is a fault of
// the node's config).
func (p *Publisher) Health() core.Health {
	p.mu.Lock()
	h := core.Health{LastProgress: p.progress, Deadline: p.progressDeadline()}
	lastErr, waiting, kicked := p.lastErr, p.waiting, p.kicked.inRow
	p.mu.Unlock()
	switch {
	case p.connected.Load():
		h.Detail = fmt.Sprintf("connected to %s (session %d)", p.broker, p.session.Load())
	case lastErr != "":
		h.Detail = fmt.Sprintf("connecting to %s: %s", p.broker, lastErr)
	default:
		h.Detail = "connecting to " + p.broker.String()
	}
	if waiting != "" && !p.connected.Load() {
		h.Detail += "; " + waiting
	}
	if kicked >= kickedAfter {
		h.Degraded = true
		h.Detail += "; " + p.kickedText(kicked)
	}
	if err := p.opts.Session.Problem(); err != nil {
		h.Degraded = true
		h.Detail += "; session numbers from the clock: " + err.Error()
	}
	return h
}

func (p *Publisher) kickedText(n int) string {
	return fmt.Sprintf("the broker closed the connection %d times in a row within %s of accepting it: another client may be using client id %s (a second node with node.name %s?), or the broker refuses what edgeheal publishes (an ACL, a packet size limit)",
		n, kickedWithin, p.clientID, p.opts.Node.Name)
}

func (p *Publisher) tick() {
	p.mu.Lock()
	p.progress = time.Now()
	p.mu.Unlock()
}

// status builds the current status message.
func (p *Publisher) status(state string, session uint64, now time.Time) wire.Status {
	p.mu.Lock()
	checks, rev := p.checks, p.revision
	p.mu.Unlock()
	sum, st := wire.Summarize(checks)
	if state == "" {
		state = st
	}
	return wire.Status{
		V: wire.Version, State: state, Session: session, TS: now.UTC(),
		Node: p.opts.Node.Name, Site: p.opts.Node.Site, Version: p.opts.Version,
		ConfigRevision: rev, Checks: &sum,
	}
}

func (p *Publisher) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = ""
	if err != nil {
		p.lastErr = err.Error()
	}
}

func (p *Publisher) setWaiting(s string) {
	p.mu.Lock()
	p.waiting = s
	p.mu.Unlock()
}
