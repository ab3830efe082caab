package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// request is one command on the control socket; one per connection.
type request struct {
	Op   string        `json:"op"` // status, fault, down
	Kind string        `json:"kind,omitempty"`
	Args []string      `json:"args,omitempty"`
	For  time.Duration `json:"for,omitempty"`
}

type response struct {
	OK     bool        `json:"ok"`
	Error  string      `json:"error,omitempty"`
	Result string      `json:"result,omitempty"`
	Status *lab.Status `json:"status,omitempty"`
}

// call sends req to the supervisor and waits up to timeout for its answer.
func call(d dirs, req request, timeout time.Duration) (response, error) {
	var resp response
	c, err := net.DialTimeout("unix", d.socket(), time.Second)
	if err != nil {
		return resp, fmt.Errorf("reaching the lab's supervisor (is the lab up?): %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return resp, err
	}
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return resp, fmt.Errorf("reading the supervisor's answer: %w", err)
	}
	if !resp.OK {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// supervise starts the lab from the run directory's options, serves the
// control socket and stops the lab on `down`, SIGINT or SIGTERM. ready, if
// not nil, is called once the lab is up and state.json written.
func supervise(d dirs, ready func(state)) error {
	o, err := readOptions(d)
	if err != nil {
		return fmt.Errorf("reading options: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	s, err := startSupervised(ctx, d, o, log)
	if err != nil {
		return err
	}
	_ = os.Remove(d.socket())
	ln, err := net.Listen("unix", d.socket())
	if err != nil {
		return errors.Join(fmt.Errorf("listening on %s: %w", d.socket(), err), s.l.Close())
	}
	if err := s.writeState(); err != nil {
		ln.Close()
		return errors.Join(err, s.l.Close())
	}
	if ready != nil {
		ready(s.current())
	}

	downc := make(chan net.Conn, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.serve(ctx, ln, downc)
	}()

	var reply net.Conn
	select {
	case <-ctx.Done():
		log.Info("signal: stopping lab")
	case reply = <-downc:
		log.Info("down: stopping lab")
	}
	ln.Close()
	wg.Wait()
	return s.shutdown(reply)
}

// supervised is the lab a supervisor owns, with what state.json says of it.
type supervised struct {
	d     dirs
	l     *lab.Lab
	log   *slog.Logger
	begin time.Time     // when the start began
	up    time.Duration // how long the start took
}

// startSupervised starts the lab o describes, giving it 45 s, under the run
// directory d; a missing prefix is drawn at random.
func startSupervised(ctx context.Context, d dirs, o options, log *slog.Logger) (*supervised, error) {
	begin := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	if o.Prefix == "" {
		o.Prefix = randomPrefix()
	}
	l, err := lab.Start(sctx, lab.Options{
		Prefix:         o.Prefix,
		RunDir:         filepath.Join(string(d), o.Prefix),
		Broker:         o.Broker,
		OffloadOff:     o.OffloadOff,
		Keepalive:      o.Keepalive,
		TelemetryRate:  o.Rate,
		NoTelemetry:    o.NoTelemetry,
		NAT:            o.NAT,
		EdgeListenPort: o.ListenPort,
		Logger:         log,
	})
	cancel()
	if err != nil {
		return nil, err
	}
	s := &supervised{d: d, l: l, log: log, begin: begin, up: time.Since(begin)}
	log.Info("lab up", "prefix", l.Prefix(), "up_seconds", s.up.Seconds())
	return s, nil
}

// current is the lab's state as of now (the cloud's address can move).
func (s *supervised) current() state {
	return state{
		PID: os.Getpid(), Prefix: s.l.Prefix(), LabRunDir: s.l.RunDir(),
		Started: s.begin, UpSeconds: s.up.Seconds(), Info: s.l.Info(),
	}
}

// writeState replaces state.json atomically, so a reader never sees half.
func (s *supervised) writeState() error {
	b, _ := json.MarshalIndent(s.current(), "", "  ")
	tmp := s.d.state() + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.d.state())
}

// serve answers one request per connection on ln until ln is closed or a
// `down` arrives; that connection goes to downc unanswered, to be answered
// once everything is removed.
func (s *supervised) serve(ctx context.Context, ln net.Listener, downc chan<- net.Conn) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var req request
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if err := json.NewDecoder(c).Decode(&req); err != nil {
			c.Close()
			continue
		}
		if req.Op == "down" {
			downc <- c // answered once everything is removed
			return
		}
		resp := handle(ctx, s.l, req, s.log)
		if req.Op == "fault" && resp.OK {
			_ = s.writeState() // the cloud's address may have moved
		}
		_ = json.NewEncoder(c).Encode(resp)
		c.Close()
	}
}

// shutdown closes the lab, removes the run directory's files and, when
// reply is a `down` request's connection, answers it with the outcome.
func (s *supervised) shutdown(reply net.Conn) error {
	cerr := s.l.Close()
	// Everything in the run directory goes: `down`, Ctrl-C (--foreground)
	// and SIGTERM leave nothing behind.
	for _, p := range []string{s.d.state(), s.d.socket(), s.d.options(), s.d.log()} {
		_ = os.Remove(p)
	}
	_ = os.Remove(string(s.d)) // only when empty
	if reply != nil {
		resp := response{OK: cerr == nil, Result: "down"}
		if cerr != nil {
			resp.Error = cerr.Error()
		}
		_ = json.NewEncoder(reply).Encode(resp)
		reply.Close()
	}
	return cerr
}

// randomPrefix is "ehl" and 4 random hex digits.
func randomPrefix() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return "ehl" + hex.EncodeToString(b[:])
}

func handle(ctx context.Context, l *lab.Lab, req request, log *slog.Logger) response {
	switch req.Op {
	case "status":
		s, err := l.Status()
		resp := response{OK: true, Status: &s}
		if err != nil {
			resp.Result = err.Error() // partial status is still useful
		}
		return resp
	case "fault":
		res, err := applyFault(ctx, l, req)
		if err != nil {
			return response{Error: err.Error()}
		}
		log.Info("fault", "kind", req.Kind, "args", req.Args, "for_seconds", req.For.Seconds(), "result", res)
		return response{OK: true, Result: res}
	}
	return response{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// parseFault turns `fault KIND ARGS` into a relay Fault for the relay
// kinds; other kinds return the zero Fault and are handled by applyFault.
func parseFault(req request) (lab.Fault, error) {
	n := len(req.Args)
	want := func(lo, hi int) error {
		if n < lo || n > hi {
			return fmt.Errorf("fault %s: %d arguments, want %d..%d", req.Kind, n, lo, hi)
		}
		return nil
	}
	switch req.Kind {
	case "pass", "blackhole":
		return lab.Fault{Kind: lab.FaultKind(req.Kind)}, want(0, 0)
	case "loss":
		if err := want(1, 1); err != nil {
			return lab.Fault{}, err
		}
		pct, err := strconv.ParseFloat(trimPct(req.Args[0]), 64)
		if err != nil {
			return lab.Fault{}, fmt.Errorf("fault loss: %w", err)
		}
		f := lab.Fault{Kind: lab.FaultLoss, LossPct: pct}
		return f, f.Validate()
	case "delay":
		if err := want(1, 2); err != nil {
			return lab.Fault{}, err
		}
		f := lab.Fault{Kind: lab.FaultDelay}
		var err error
		if f.Delay, err = time.ParseDuration(req.Args[0]); err != nil {
			return f, fmt.Errorf("fault delay: %w", err)
		}
		if n == 2 {
			if f.Jitter, err = time.ParseDuration(req.Args[1]); err != nil {
				return f, fmt.Errorf("fault delay jitter: %w", err)
			}
		}
		return f, f.Validate()
	case "mtu":
		if err := want(1, 1); err != nil {
			return lab.Fault{}, err
		}
		n, err := strconv.Atoi(req.Args[0])
		if err != nil {
			return lab.Fault{}, fmt.Errorf("fault mtu: %q is not a number of bytes", req.Args[0])
		}
		f := lab.Fault{Kind: lab.FaultMTU, MTU: n}
		return f, f.Validate()
	case "replug", "broker-stop", "broker-start", "restart-cloud-wg", "move-endpoint", "nat-stuck", "nat-clear", "nat-remap":
		return lab.Fault{}, want(0, 0)
	case "offload":
		if err := want(1, 1); err != nil {
			return lab.Fault{}, err
		}
		if req.Args[0] != "on" && req.Args[0] != "off" {
			return lab.Fault{}, fmt.Errorf("fault offload %q: want on or off", req.Args[0])
		}
		return lab.Fault{}, nil
	}
	return lab.Fault{}, fmt.Errorf("unknown fault %q", req.Kind)
}

func trimPct(s string) string {
	if len(s) > 0 && s[len(s)-1] == '%' {
		return s[:len(s)-1]
	}
	return s
}

// applyFault carries out one fault. --for applies to the relay faults and
// to broker-stop (the broker starts again after it).
func applyFault(ctx context.Context, l *lab.Lab, req request) (string, error) {
	f, err := parseFault(req)
	if err != nil {
		return "", err
	}
	if f.Kind != "" {
		if err := l.SetFault(f, req.For); err != nil {
			return "", err
		}
		if req.For > 0 {
			return fmt.Sprintf("modem: %s for %v", f, req.For), nil
		}
		return "modem: " + f.String(), nil
	}
	switch req.Kind {
	case "replug":
		return "edge uplink re-plugged (TX checksum offload back on)", l.Replug(ctx)
	case "offload":
		return "edge uplink TX checksum offload " + req.Args[0], l.SetUplinkTxChecksum(req.Args[0] == "on")
	case "broker-stop":
		if err := l.StopBroker(); err != nil {
			return "", err
		}
		if req.For > 0 {
			time.AfterFunc(req.For, func() { _ = l.StartBroker() })
			return fmt.Sprintf("broker stopped for %v", req.For), nil
		}
		return "broker stopped", nil
	case "broker-start":
		return "broker started", l.StartBroker()
	case "restart-cloud-wg":
		return "cloud WireGuard restarted (same key and port, no sessions)", l.RestartCloudWireGuard()
	case "move-endpoint":
		a, err := l.MoveCloudEndpoint()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("cloud public address is now %s (%s follows)", a, lab.CloudHost), nil
	case "nat-stuck":
		m, err := l.NATStuck()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("carrier: the tunnel's mapping %s is blackholed; new flows pass", m), nil
	case "nat-clear":
		return "carrier: stuck mappings pass again", l.NATClear()
	case "nat-remap":
		p, err := l.NATRemap()
		if err != nil {
			return "", err
		}
		return "carrier: every mapping flushed; public side now " + p, nil
	}
	return "", fmt.Errorf("unknown fault %q", req.Kind)
}
