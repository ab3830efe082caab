// Package mqtt reports the node to the cloud over MQTT 3.1.1: a retained
// status with a Last Will, and the events of the outbox, each acked in the
// outbox only after the broker's PUBACK. It also defines those payloads,
// which the cloud side reads.
package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
)

// DefaultTopicPrefix is used when report.mqtt.topic_prefix is empty.
const DefaultTopicPrefix = "edgeheal/v1"

// Options configure a Publisher. Config, Node, Outbox and Session are
// required; zero durations take the documented defaults.
type Options struct {
	Config  configs.ReportMQTT
	Node    configs.Node
	Version string // agent version, in every status
	Outbox  *outbox.Outbox
	Session *Session
	Logger  *slog.Logger

	Heartbeat   time.Duration // status re-published this often; default 5m
	DialTimeout time.Duration // TCP+TLS dial and CONNACK wait; default 10s
	MinBackoff  time.Duration // first reconnect delay; default 1s
	MaxBackoff  time.Duration // reconnect delay cap; default 2m
	AckTimeout  time.Duration // PUBACK wait per publish; default 30s
	Window      int           // events in flight at once; default 16
}

// Publisher reports to the cloud broker over the host network (it dials
// from the namespace of the process, never through the overlay the agent
// repairs):
//
//   - <prefix>/<node>/status, retained, QoS 1: a StatusMessage, published on
//     every connect, on every change and every Heartbeat;
//   - the Last Will, retained on the same topic: {"v":1,"state":"lost","session":N};
//   - <prefix>/<node>/event, QoS 1, not retained: one EventMessage per queued
//     outbox event, each acked in the outbox only after its PUBACK.
//
// Every connection attempt is a new paho client: paho fixes the Will when a
// client is made, and the Will must carry the session of its own
// connection. So paho's auto-reconnect and connect-retry are off and the
// Publisher reconnects itself, with full jitter between MinBackoff and a
// delay doubling up to MaxBackoff.
//
// It is an agent.Component. Nothing the agent's loop calls (SetChecks,
// SetConfigRevision, Outbox.Append) waits for the broker. The password is
// read from its file at each attempt and never logged or reported.
type Publisher struct {
	opts     Options
	log      *slog.Logger
	broker   configs.BrokerURL
	prefix   string
	clientID string

	mu       sync.Mutex
	checks   []agent.Check
	revision string
	lastErr  string
	progress time.Time

	changed   chan struct{}
	connected atomic.Bool
	session   atomic.Uint64
}

var _ agent.Component = (*Publisher)(nil)

// NewPublisher checks the options and returns a Publisher that is not
// running. Files (TLS, password) are read when it connects, not here: a
// file that is missing is a state of the running component, reported and
// retried, not a reason for the agent not to start.
func NewPublisher(opts Options) (*Publisher, error) {
	if opts.Config.Broker == "" {
		return nil, errors.New("creating the mqtt publisher: no broker configured")
	}
	broker, err := configs.ParseBrokerURL(opts.Config.Broker)
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
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.Heartbeat, 5*time.Minute)
	def(&opts.DialTimeout, 10*time.Second)
	def(&opts.MinBackoff, time.Second)
	def(&opts.MaxBackoff, 2*time.Minute)
	def(&opts.AckTimeout, 30*time.Second)
	if opts.Window <= 0 {
		opts.Window = 16
	}
	p := &Publisher{
		opts:     opts,
		broker:   broker,
		prefix:   strings.TrimRight(opts.Config.TopicPrefix, "/"),
		clientID: opts.Config.ClientID,
		changed:  make(chan struct{}, 1),
	}
	if p.prefix == "" {
		p.prefix = DefaultTopicPrefix
	}
	if p.clientID == "" {
		p.clientID = "edgeheal-" + opts.Node.Name
	}
	p.log = opts.Logger.With("broker", opts.Config.Broker, "client_id", p.clientID)
	p.session.Store(opts.Session.Current())
	return p, nil
}

// StatusTopic is <prefix>/<node>/status.
func (p *Publisher) StatusTopic() string { return p.prefix + "/" + p.opts.Node.Name + "/status" }

// EventTopic is <prefix>/<node>/event.
func (p *Publisher) EventTopic() string { return p.prefix + "/" + p.opts.Node.Name + "/event" }

// SetChecks replaces the checks shown in the status. It never blocks; the
// status is re-published when its content changed.
func (p *Publisher) SetChecks(checks []agent.Check) {
	p.mu.Lock()
	p.checks = append([]agent.Check(nil), checks...)
	p.mu.Unlock()
	p.poke()
}

// SetConfigRevision sets the config revision shown in the status. It never
// blocks.
func (p *Publisher) SetConfigRevision(rev string) {
	p.mu.Lock()
	p.revision = rev
	p.mu.Unlock()
	p.poke()
}

func (p *Publisher) poke() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Connected reports whether a broker connection is up.
func (p *Publisher) Connected() bool { return p.connected.Load() }

// Info is what /v1/status shows about MQTT; never credentials.
type Info struct {
	Broker    string `json:"broker"`
	ClientID  string `json:"client_id"`
	Connected bool   `json:"connected"`
	Session   uint64 `json:"session"`
	LastError string `json:"last_error,omitempty"`
}

// Info reports the connection state.
func (p *Publisher) Info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Info{
		Broker: p.opts.Config.Broker, ClientID: p.clientID,
		Connected: p.connected.Load(), Session: p.session.Load(), LastError: p.lastErr,
	}
}

// Name implements agent.Component.
func (p *Publisher) Name() string { return "mqtt" }

// progressDeadline is how long the publisher may go without passing
// through its loop: the longest legitimate wait (a reconnect backoff, or a
// connect and a window of PUBACKs) with room to spare.
func (p *Publisher) progressDeadline() time.Duration {
	return p.opts.MaxBackoff + 4*p.opts.DialTimeout + 2*p.opts.AckTimeout + time.Minute
}

// Health implements agent.Component. Being disconnected is not a fault of
// the node (the broker or the path to it is down) and is only detail; a
// session counter that is not kept on disk is.
func (p *Publisher) Health() agent.Health {
	p.mu.Lock()
	h := agent.Health{LastProgress: p.progress, Deadline: p.progressDeadline()}
	lastErr := p.lastErr
	p.mu.Unlock()
	switch {
	case p.connected.Load():
		h.Detail = fmt.Sprintf("connected to %s (session %d)", p.opts.Config.Broker, p.session.Load())
	case lastErr != "":
		h.Detail = fmt.Sprintf("connecting to %s: %s", p.opts.Config.Broker, lastErr)
	default:
		h.Detail = "connecting to " + p.opts.Config.Broker
	}
	if err := p.opts.Session.Problem(); err != nil {
		h.Degraded = true
		h.Detail += "; session numbers from the clock: " + err.Error()
	}
	return h
}

func (p *Publisher) tick() {
	p.mu.Lock()
	p.progress = time.Now()
	p.mu.Unlock()
}

// status builds the current status message.
func (p *Publisher) status(state string, session uint64, now time.Time) StatusMessage {
	p.mu.Lock()
	checks, rev := p.checks, p.revision
	p.mu.Unlock()
	sum, st := summarize(checks)
	if state == "" {
		state = st
	}
	return StatusMessage{
		V: PayloadVersion, State: state, Session: session, TS: now.UTC(),
		Node: p.opts.Node.Name, Site: p.opts.Node.Site, Version: p.opts.Version,
		ConfigRevision: rev, Checks: &sum,
	}
}

// Run implements agent.Component: it connects and serves until ctx ends,
// then publishes the retained `offline` status, disconnects cleanly (so
// the broker discards the Will) and returns nil. A broker that cannot be
// reached is retried here, with backoff; a TLS or password file that
// cannot be read is the error Run returns.
func (p *Publisher) Run(ctx context.Context) error {
	backoff := p.opts.MinBackoff
	for ctx.Err() == nil {
		p.tick()
		l, err := p.connect(ctx)
		session := p.session.Load()
		if errors.Is(err, errSetup) {
			p.setErr(err)
			return err
		}
		if err != nil {
			p.setErr(err)
			// Full jitter, so a fleet that lost the broker together does not
			// come back in one wave.
			d := p.opts.MinBackoff + rand.N(backoff-p.opts.MinBackoff+1)
			p.log.Warn("mqtt connect failed", "session", session, "retry_in_seconds", d.Seconds(), "err", err)
			backoff = min(2*backoff, p.opts.MaxBackoff)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		backoff = p.opts.MinBackoff
		p.setErr(nil)
		p.log.Info("mqtt connected", "session", session)
		p.connected.Store(true)
		err = p.serve(ctx, l)
		p.connected.Store(false)
		if err != nil {
			p.setErr(err)
			p.log.Warn("mqtt connection lost", "session", session, "err", err)
		}
	}
	return nil
}

func (p *Publisher) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = ""
	if err != nil {
		p.lastErr = err.Error()
	}
}
