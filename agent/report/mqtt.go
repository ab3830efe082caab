package report

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/configs"
)

// DefaultTopicPrefix is used when report.mqtt.topic_prefix is empty.
const DefaultTopicPrefix = "edgeheal/v1"

// PublisherOptions configure a Publisher. Config, Node, Outbox and Session
// are required; zero durations take the documented defaults.
type PublisherOptions struct {
	Config  configs.ReportMQTT
	Node    configs.Node
	Version string // agent version, in every status
	Outbox  *Outbox
	Session *Session
	Logger  *slog.Logger

	Heartbeat   time.Duration // status re-published this often; default 5m
	DialTimeout time.Duration // TCP+TLS dial and CONNACK wait; default 10s
	MinBackoff  time.Duration // first reconnect delay; default 1s
	MaxBackoff  time.Duration // reconnect delay cap; default 2m
	AckTimeout  time.Duration // PUBACK wait per publish; default 30s
	Window      int           // events in flight at once; default 16
}

// Publisher reports to the cloud broker over MQTT 3.1.1 (paho, over the
// host network: it dials from the namespace of the process, never through
// the overlay the agent repairs):
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
// Start returns at once and nothing the agent's loop calls (SetChecks,
// SetConfigRevision, Outbox.Append) waits for the broker. The password is
// read from its file at each attempt and never logged or reported.
type Publisher struct {
	opts     PublisherOptions
	log      *slog.Logger
	prefix   string
	clientID string

	mu       sync.Mutex
	checks   []agent.Check
	revision string
	lastErr  string

	changed   chan struct{}
	connected atomic.Bool
	session   atomic.Uint64

	cancel context.CancelFunc
	done   chan struct{}
}

// NewPublisher checks the options (the TLS files must load, the password
// file must be readable) and returns a Publisher that is not started.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	if opts.Config.Broker == "" {
		return nil, errors.New("creating mqtt publisher: no broker configured")
	}
	u, err := url.Parse(opts.Config.Broker)
	if err != nil {
		return nil, fmt.Errorf("creating mqtt publisher: broker: %w", err)
	}
	switch u.Scheme {
	case "ssl", "tls", "mqtts", "tcps", "mqtt+ssl":
	case "tcp", "mqtt":
		if opts.Config.TLS.Enabled() {
			return nil, fmt.Errorf("creating mqtt publisher: tls is configured but the broker URL %s is plain %s://; use ssl://", opts.Config.Broker, u.Scheme)
		}
	default:
		return nil, fmt.Errorf("creating mqtt publisher: broker URL %q: scheme must be tcp://, mqtt://, ssl://, tls:// or mqtts://", opts.Config.Broker)
	}
	if opts.Outbox == nil || opts.Session == nil {
		return nil, errors.New("creating mqtt publisher: outbox and session are required")
	}
	if opts.Node.Name == "" {
		return nil, errors.New("creating mqtt publisher: node name is empty")
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
	if opts.Config.TLS.Enabled() {
		if _, err := tlsConfig(opts.Config.TLS); err != nil {
			return nil, fmt.Errorf("creating mqtt publisher: %w", err)
		}
	}
	if opts.Config.PasswordFile != "" {
		if _, err := readPassword(opts.Config.PasswordFile); err != nil {
			return nil, fmt.Errorf("creating mqtt publisher: %w", err)
		}
	}
	p.session.Store(opts.Session.Current())
	return p, nil
}

// StatusTopic is <prefix>/<node>/status.
func (p *Publisher) StatusTopic() string { return p.prefix + "/" + p.opts.Node.Name + "/status" }

// EventTopic is <prefix>/<node>/event.
func (p *Publisher) EventTopic() string { return p.prefix + "/" + p.opts.Node.Name + "/event" }

// tlsConfig loads the CA, the client certificate and the server name.
func tlsConfig(c configs.TLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("reading broker CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading broker CA %s: no PEM certificate in it", c.CA)
		}
		cfg.RootCAs = pool
	}
	if c.Cert != "" || c.Key != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readPassword reads a password file; only a trailing line end is removed.
// Errors never contain the file's content.
func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading mqtt password file: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("reading mqtt password file %s: it is empty", path)
	}
	return pw, nil
}

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

// Session is the session number of the current (or last) connection.
func (p *Publisher) Session() uint64 { return p.session.Load() }

// PublisherInfo is what /v1/status shows about MQTT; never credentials.
type PublisherInfo struct {
	Broker    string `json:"broker"`
	ClientID  string `json:"client_id"`
	Connected bool   `json:"connected"`
	Session   uint64 `json:"session"`
	LastError string `json:"last_error,omitempty"`
}

// Info reports the connection state.
func (p *Publisher) Info() PublisherInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PublisherInfo{
		Broker: p.opts.Config.Broker, ClientID: p.clientID,
		Connected: p.connected.Load(), Session: p.session.Load(), LastError: p.lastErr,
	}
}

// status builds the current status message.
func (p *Publisher) status(state string, session uint64, now time.Time) StatusMessage {
	p.mu.Lock()
	checks, rev := p.checks, p.revision
	p.mu.Unlock()
	sum, st := Summarize(checks)
	if state == "" {
		state = st
	}
	return StatusMessage{
		V: StatusVersion, State: state, Session: session, TS: now.UTC(),
		Node: p.opts.Node.Name, Site: p.opts.Node.Site, Version: p.opts.Version,
		ConfigRevision: rev, Checks: &sum,
	}
}

// Start runs the publisher in a goroutine it owns and returns at once.
// Stop (or cancelling ctx) ends it. Start must be called once.
func (p *Publisher) Start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		p.run(ctx)
	}()
}

// Stop publishes the retained `offline` status if connected, disconnects
// cleanly (so the broker discards the Will) and waits for the publisher's
// goroutine, or until ctx is done.
func (p *Publisher) Stop(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping mqtt publisher: %w", ctx.Err())
	}
}

func (p *Publisher) run(ctx context.Context) {
	backoff := p.opts.MinBackoff
	for ctx.Err() == nil {
		l, err := p.connect(ctx)
		session := p.session.Load()
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
				return
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
}

func (p *Publisher) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = ""
	if err != nil {
		p.lastErr = err.Error()
	}
}

// link is one broker connection.
type link struct {
	c       mqtt.Client
	session uint64
	lost    chan error // connection lost (buffered, 1)
	raw     func() net.Conn
}

// abort closes the TCP connection without an MQTT DISCONNECT, so the broker
// publishes the Will: the cloud must not keep seeing a stale "online" while
// this node is reconnecting or gone.
func (l *link) abort() {
	if c := l.raw(); c != nil {
		c.Close()
	}
	l.c.Disconnect(0) // releases paho's goroutines; the DISCONNECT cannot reach the broker now
}

// connect makes a new client whose Will carries a new session number and
// connects it. It waits at most about 2×DialTimeout, even if ctx is done,
// so that a Stop during a connect can still say goodbye.
func (p *Publisher) connect(ctx context.Context) (*link, error) {
	session, err := p.opts.Session.Next()
	if err != nil {
		return nil, err
	}
	p.session.Store(session)
	will, err := json.Marshal(StatusMessage{V: StatusVersion, State: StateLost, Session: session})
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if p.opts.Config.TLS.Enabled() {
		if tc, err = tlsConfig(p.opts.Config.TLS); err != nil {
			return nil, err
		}
	}
	var (
		rawMu sync.Mutex
		raw   net.Conn
	)
	o := mqtt.NewClientOptions().
		AddBroker(p.opts.Config.Broker).
		SetClientID(p.clientID).
		// Set explicitly: left at 0, paho falls back to 3.1 on a refused
		// CONNECT and doubles the time a dead broker costs.
		SetProtocolVersion(4).
		// The outbox is the durable queue; paho's store only holds what is
		// in flight on this one connection.
		SetCleanSession(true).
		SetStore(mqtt.NewMemoryStore()).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(p.opts.DialTimeout).
		SetWriteTimeout(p.opts.DialTimeout).
		SetKeepAlive(30*time.Second).
		SetPingTimeout(10*time.Second).
		SetOrderMatters(false).
		SetBinaryWill(p.StatusTopic(), will, 1, true).
		// Our own dial: a dial timeout of our choosing, no proxy from the
		// environment (the report path is the host network, direct), and a
		// handle on the TCP connection for abort.
		SetCustomOpenConnectionFn(func(uri *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			c, err := dialBroker(uri, tc, p.opts.DialTimeout)
			if err == nil {
				rawMu.Lock()
				raw = c
				rawMu.Unlock()
			}
			return c, err
		})
	if p.opts.Config.Username != "" {
		o.SetUsername(p.opts.Config.Username)
	}
	if p.opts.Config.PasswordFile != "" {
		pw, err := readPassword(p.opts.Config.PasswordFile)
		if err != nil {
			return nil, err
		}
		o.SetPassword(pw)
	}
	lost := make(chan error, 1)
	o.SetConnectionLostHandler(func(_ mqtt.Client, err error) {
		select {
		case lost <- err:
		default:
		}
	})
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(2*p.opts.DialTimeout + time.Second) {
		c.Disconnect(0)
		return nil, fmt.Errorf("connecting to %s: no CONNACK within %s", p.opts.Config.Broker, 2*p.opts.DialTimeout)
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", p.opts.Config.Broker, err)
	}
	return &link{c: c, session: session, lost: lost, raw: func() net.Conn {
		rawMu.Lock()
		defer rawMu.Unlock()
		return raw
	}}, nil
}

// dialBroker opens the TCP (and TLS) connection for tcp://, mqtt://,
// ssl://, tls://, mqtts:// and tcps:// URLs; default ports 1883 and 8883.
func dialBroker(uri *url.URL, tc *tls.Config, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	host := uri.Host
	switch uri.Scheme {
	case "tcp", "mqtt":
		if uri.Port() == "" {
			host = net.JoinHostPort(uri.Hostname(), "1883")
		}
		return d.Dial("tcp", host)
	case "ssl", "tls", "mqtts", "tcps", "mqtt+ssl":
		if uri.Port() == "" {
			host = net.JoinHostPort(uri.Hostname(), "8883")
		}
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12} // system roots
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", host)
	}
	return nil, fmt.Errorf("mqtt broker scheme %q is not supported (use tcp:// or ssl://)", uri.Scheme)
}

// serve runs one connection: status on connect, on change and on the
// heartbeat; queued events in order. It returns nil after a clean goodbye
// (ctx done) and an error when the connection was lost.
func (p *Publisher) serve(ctx context.Context, l *link) error {
	c, session, lost := l.c, l.session, l.lost
	// fail ends the connection after an error: a goodbye if we are
	// stopping anyway, otherwise an abort that lets the Will speak.
	fail := func(err error) error {
		if ctx.Err() != nil {
			p.goodbye(c, session)
			return nil
		}
		l.abort()
		return err
	}
	var lastBody []byte // last status published, without its timestamp
	publishStatus := func(force bool) error {
		msg := p.status("", session, time.Now())
		// A change is a change of what the cloud acts on: states, health,
		// last actions, revision. Details (ages, counters) ride along but do
		// not trigger a publish of their own; the heartbeat refreshes them.
		key := msg
		key.TS = time.Time{}
		key.Checks = &ChecksSummary{Total: msg.Checks.Total, Healthy: msg.Checks.Healthy}
		for _, it := range msg.Checks.Items {
			it.Detail = ""
			key.Checks.Items = append(key.Checks.Items, it)
		}
		kb, _ := json.Marshal(key)
		if !force && bytes.Equal(kb, lastBody) {
			return nil
		}
		b, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		if err := p.wait(ctx, c.Publish(p.StatusTopic(), 1, true, b), lost); err != nil {
			return fmt.Errorf("publishing status: %w", err)
		}
		lastBody = kb
		return nil
	}
	if err := publishStatus(true); err != nil {
		return fail(err)
	}
	heartbeat := time.NewTicker(p.opts.Heartbeat)
	defer heartbeat.Stop()
	drain := true
	for {
		if drain {
			drain = false
			more, err := p.publishEvents(ctx, c, lost)
			if err != nil {
				// No PUBACK in time (or the link broke): the connection
				// is not to be trusted. Reconnect; the events stay queued.
				return fail(err)
			}
			drain = more
		}
		if drain {
			// Between batches, let a status change through first.
			select {
			case <-p.changed:
				if err := publishStatus(false); err != nil {
					return fail(err)
				}
			default:
			}
			continue
		}
		select {
		case <-ctx.Done():
			p.goodbye(c, session)
			return nil
		case err := <-lost:
			c.Disconnect(0)
			return fmt.Errorf("connection lost: %w", err)
		case <-p.changed:
			if err := publishStatus(false); err != nil {
				return fail(err)
			}
		case <-heartbeat.C:
			if err := publishStatus(true); err != nil {
				return fail(err)
			}
		case <-p.opts.Outbox.Changed():
			drain = true
		}
	}
}

// publishEvents publishes up to Window queued events, waits for their
// PUBACKs and acks each acknowledged one in the outbox. more is true when
// the whole window went through (there may be more queued).
func (p *Publisher) publishEvents(ctx context.Context, c mqtt.Client, lost chan error) (more bool, err error) {
	items := p.opts.Outbox.Pending(p.opts.Window)
	if len(items) == 0 || ctx.Err() != nil {
		return false, nil
	}
	toks := make([]mqtt.Token, len(items))
	for i, it := range items {
		b, err := json.Marshal(EventMessage{V: StatusVersion, Node: p.opts.Node.Name, Site: p.opts.Node.Site, Event: it.Event})
		if err != nil {
			// Cannot happen for JSON-decoded events; never let one event
			// block the queue forever.
			p.log.Error("dropping unencodable event", "event_id", it.Event.ID, "err", err)
			p.opts.Outbox.Ack(it.Seq)
			continue
		}
		toks[i] = c.Publish(p.EventTopic(), 1, false, b)
	}
	for i, tok := range toks {
		if tok == nil {
			continue
		}
		if werr := p.wait(ctx, tok, lost); werr != nil {
			if err == nil {
				err = fmt.Errorf("publishing event %s: %w", items[i].Event.ID, werr)
			}
			continue
		}
		if aerr := p.opts.Outbox.Ack(items[i].Seq); aerr != nil && err == nil {
			err = aerr
		}
	}
	return err == nil && len(items) == p.opts.Window, err
}

// wait waits for a token up to AckTimeout, or until ctx is done (a Stop
// must not wait for a hung broker). A lost connection fails it at
// once (paho completes in-flight tokens with an error too; this is the
// belt to that brace), and the loss is put back for the caller's select.
func (p *Publisher) wait(ctx context.Context, tok mqtt.Token, lost chan error) error {
	t := time.NewTimer(p.opts.AckTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("stopping: %w", ctx.Err())
	case <-tok.Done():
		return tok.Error()
	case err := <-lost:
		select {
		case lost <- err:
		default:
		}
		return fmt.Errorf("connection lost: %w", err)
	case <-t.C:
		return fmt.Errorf("no acknowledgement within %s", p.opts.AckTimeout)
	}
}

// goodbye publishes `offline` (retained) and disconnects cleanly, so the
// broker discards the Will.
func (p *Publisher) goodbye(c mqtt.Client, session uint64) {
	b, err := json.Marshal(p.status(StateOffline, session, time.Now()))
	if err == nil {
		tok := c.Publish(p.StatusTopic(), 1, true, b)
		if !tok.WaitTimeout(2*time.Second) || tok.Error() != nil {
			p.log.Warn("mqtt offline status not acknowledged", "session", session, "err", tok.Error())
		}
	}
	c.Disconnect(250)
	p.log.Info("mqtt disconnected", "session", session)
}
