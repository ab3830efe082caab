// Package httpapi serves edgeheal's local HTTP endpoints on two
// listeners, each a component of its own so that one that cannot listen
// costs nothing of the other:
//
//   - the TCP listener (report.http.listen, component "http"): /livez,
//     /healthz, /readyz, /readyz/workload/<name> and /metrics, for probes
//     and scrapers; nothing else, since anyone on the node can bind a
//     port first;
//   - the local API on a Unix socket (report.http.socket, component
//     "local"): the same, and /v1/status, which `edgeheal status` and
//     edgeheal-kube read (localapi is their client). The socket is root's,
//     mode 0660 with the edgeheal group when the package made it, 0600
//     otherwise; its directory must be root's and writable by root alone.
//     A route of its own is added with Handle before Run.
//
// Neither changes anything: the agent is only read.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/localapi"
	"github.com/edgeheal/edgeheal/wire"
)

// AgentState is what the HTTP endpoints read from the agent. Every method
// must be cheap and must not wait for the control loop (return a snapshot).
type AgentState interface {
	// Checks is the current state of every check.
	Checks() []wire.Check
	// Ready reports whether the config is loaded, the handles are open and
	// the first round is done; detail says what is missing. The broker is
	// not part of readiness.
	Ready() (ready bool, detail string)
	// LastProgress is when the control loop last completed a round.
	LastProgress() time.Time
	// WorkloadReady reports the health of the workload's network path;
	// found is false for an unknown name.
	WorkloadReady(name string) (ready bool, detail string, found bool)
}

// ServerOptions configure the HTTP server. State is required.
type ServerOptions struct {
	Listen string // report.http.listen, e.g. "127.0.0.1:9469": the TCP listener (NewServer)
	Socket string // report.http.socket: the local API's Unix socket (NewLocal)
	// SocketGroup may use the socket too (mode 0660) when it exists;
	// default localapi.Group.
	SocketGroup string
	State       AgentState
	Metrics     http.Handler         // nil: /metrics answers 404
	Outbox      OutboxStats          // nil: no outbox in /v1/status
	MQTT        func() wire.MQTTInfo // nil: no mqtt in /v1/status
	Info        func() wire.NodeInfo // node, site, version, config revision
	Logger      *slog.Logger
	// Stale is how long the loop may go without progress before /livez
	// fails; default 3 × the loop interval is the caller's business, 2m if 0.
	Stale time.Duration
	Now   func() time.Time
}

// OutboxStats is the part of the outbox /v1/status shows.
type OutboxStats interface {
	Depth() int
	Dropped() uint64
}

// Server serves /livez, /healthz, /readyz, /readyz/workload/<name>,
// /metrics and /v1/status. It only reads; nothing it serves changes the
// agent.
type Server struct {
	opts    ServerOptions
	started time.Time
	local   bool                    // the Unix socket's server: the whole API
	routes  map[string]http.Handler // the local API's own routes

	mu sync.Mutex
	ln net.Listener
}

// NewServer builds the TCP server of metrics and health on opts.Listen
// (component "http"); Run listens.
func NewServer(opts ServerOptions) *Server {
	return newServer(opts, false)
}

// NewLocal builds the local API's server on the Unix socket opts.Socket
// (component "local"): health, metrics and /v1/status; Run listens.
func NewLocal(opts ServerOptions) *Server {
	s := newServer(opts, true)
	s.routes = map[string]http.Handler{"GET " + localapi.StatusPath: http.HandlerFunc(s.status)}
	return s
}

// Handle adds a route to the local API (a pattern of net/http's ServeMux,
// e.g. "GET /v1/history"), before Run.
func (s *Server) Handle(pattern string, h http.Handler) {
	if s.routes == nil {
		panic("httpapi: routes are the local API's: " + pattern)
	}
	s.routes[pattern] = h
}

func newServer(opts ServerOptions, local bool) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stale <= 0 {
		opts.Stale = 2 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Info == nil {
		opts.Info = func() wire.NodeInfo { return wire.NodeInfo{} }
	}
	if opts.SocketGroup == "" {
		opts.SocketGroup = localapi.Group
	}
	return &Server{opts: opts, started: opts.Now(), local: local}
}

// Handler is the server's mux, for tests and for embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", s.livez)
	mux.HandleFunc("GET /healthz", s.livez)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /readyz/workload/{name}", s.workload)
	for p, h := range s.routes {
		mux.Handle(p, h)
	}
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	return mux
}

// Name implements core.Component.
func (s *Server) Name() string {
	if s.local {
		return "local"
	}
	return "http"
}

// Health implements core.Component: the server is passive, its progress
// is not watched.
func (s *Server) Health() core.Health {
	if a := s.Addr(); a != nil {
		return core.Health{Detail: "listening on " + a.String()}
	}
	return core.Health{Detail: "not listening"}
}

// Run implements core.Component: it listens on Listen (an address that is
// taken or invalid is the error Run returns: the supervisor tries again
// later) and serves until ctx ends, then lets requests in flight finish for
// up to 5 s.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Listen opens the listener; Serve serves on it. A TCP port another
// process holds is an error that says whose it is and that status and
// control are on the socket.
func (s *Server) Listen() error {
	var ln net.Listener
	var err error
	if s.local {
		ln, err = listenSocket(s.opts.Socket, s.opts.SocketGroup)
	} else if ln, err = net.Listen("tcp", s.opts.Listen); err != nil {
		err = fmt.Errorf("listening for metrics and health on %s: %w%s", s.opts.Listen, err, takenBy(s.opts.Listen, err))
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	return nil
}

// Serve serves on the listener Listen opened until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		s.mu.Lock()
		s.ln = nil
		s.mu.Unlock()
	}()
	select {
	case err := <-done:
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.opts.Logger.Warn("http server did not stop cleanly", "error", err)
	}
	<-done
	return nil
}

// Addr is the address listened on (useful with port 0), nil when not
// listening.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

func text(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// Live reports whether the loop made progress within Stale, with a reason.
// Before the first round the server's start counts as progress, so a
// starting agent is live for Stale and no longer.
func (s *Server) Live() (bool, string) {
	last := s.opts.State.LastProgress()
	if last.IsZero() {
		if since := s.opts.Now().Sub(s.started); since > s.opts.Stale {
			return false, fmt.Sprintf("the control loop completed no round in the %s since start (limit %s)", since.Round(time.Second), s.opts.Stale)
		}
		return true, "ok: starting"
	}
	age := s.opts.Now().Sub(last)
	if age > s.opts.Stale {
		return false, fmt.Sprintf("the control loop made no progress for %s (limit %s)", age.Round(time.Second), s.opts.Stale)
	}
	return true, fmt.Sprintf("ok: last round %s ago", age.Round(time.Millisecond))
}

func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	ok, msg := s.Live()
	if !ok {
		text(w, http.StatusServiceUnavailable, msg)
		return
	}
	text(w, http.StatusOK, msg)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ok, detail := s.opts.State.Ready()
	if !ok {
		text(w, http.StatusServiceUnavailable, "not ready: "+detail)
		return
	}
	text(w, http.StatusOK, "ok")
}

func (s *Server) workload(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ok, detail, found := s.opts.State.WorkloadReady(name)
	switch {
	case !found:
		text(w, http.StatusNotFound, fmt.Sprintf("no workload %q is configured", name))
	case !ok:
		text(w, http.StatusServiceUnavailable, "not ready: "+detail)
	default:
		text(w, http.StatusOK, "ok")
	}
}

// Status builds the /v1/status response.
func (s *Server) Status() wire.LocalStatus {
	checks := s.opts.State.Checks()
	if checks == nil {
		checks = []wire.Check{}
	}
	state, _, _ := wire.NodeState(checks)
	ready, detail := s.opts.State.Ready()
	resp := wire.LocalStatus{
		V: wire.Version, NodeInfo: s.opts.Info(), State: state,
		Ready: ready, ReadyDetail: detail, LastProgress: s.opts.State.LastProgress(), Checks: checks,
	}
	if s.opts.Outbox != nil {
		resp.Outbox = &wire.OutboxInfo{Depth: s.opts.Outbox.Depth(), Dropped: s.opts.Outbox.Dropped()}
	}
	if s.opts.MQTT != nil {
		mi := s.opts.MQTT()
		resp.MQTT = &mi
	}
	return resp
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	if strings.Contains(r.URL.RawQuery, "pretty") {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(s.Status()); err != nil {
		s.opts.Logger.Debug("writing /v1/status", "err", err)
	}
}
