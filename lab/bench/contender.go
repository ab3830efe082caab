package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// Contender names: what keeps the edge's tunnel alive in a run.
const (
	// None is WireGuard alone with keepalive 0, as Flannel defaults it.
	None = "none"
	// Keepalive25 is PersistentKeepalive 25 s and nothing else, as K3s's
	// wireguard-native backend sets it.
	Keepalive25 = "keepalive-25s"
	// Reresolve is wireguard-tools' reresolve-dns.sh run every 30 s (as its
	// documentation suggests) with keepalive 25 s.
	Reresolve = "reresolve-dns"
	// MTUProbing is WireGuard alone with the kernel's TCP MTU probing on
	// (net.ipv4.tcp_mtu_probing=1) at both ends of every transfer: the
	// pod, the edge and the cloud. It plays S8 only.
	MTUProbing = "mtu-probing"
	// Edgeheal is the edgeheal daemon with its defaults (keepalive 0 in
	// WireGuard's own config: edgeheal sets 20 s).
	Edgeheal = "edgeheal"
)

// Contenders lists every contender in report order; None first, because
// every ratio is against it.
var Contenders = []string{None, Keepalive25, Reresolve, MTUProbing, Edgeheal}

// ReresolveScript is the Debian package's copy of reresolve-dns.sh.
const ReresolveScript = "/usr/share/doc/wireguard-tools/examples/reresolve-dns/reresolve-dns.sh"

// Action is something a contender did to the system.
type Action struct {
	At     time.Time `json:"at"`
	What   string    `json:"what"`             // rung or fix: offload-off, handshake, reresolve, wg-set-endpoint, ...
	Target string    `json:"target,omitempty"` // link, or interface/peer
	Tunnel bool      `json:"tunnel"`           // an action on the tunnel (needless when the broker is down)
}

// running is one contender attached to one lab.
type running interface {
	// Actions taken at or after from.
	actions(from time.Time) []Action
	// detected is the first sign after t that the contender noticed a
	// problem (an incident or drift event, or its first action), if any.
	detected(t time.Time) (time.Time, string, bool)
	// events are the agent's reported events (edgeheal only).
	events() []Event
	stop() error
}

// labOptions are the lab settings a contender needs.
func labOptions(contender string) lab.Options {
	switch contender {
	case Keepalive25, Reresolve:
		return lab.Options{Keepalive: 25 * time.Second}
	}
	return lab.Options{}
}

// passive is a contender that runs nothing (None, Keepalive25).
type passive struct{}

func (passive) actions(time.Time) []Action                   { return nil }
func (passive) detected(time.Time) (time.Time, string, bool) { return time.Time{}, "", false }
func (passive) events() []Event                              { return nil }
func (passive) stop() error                                  { return nil }

// reresolveLoop runs reresolve-dns.sh inside the edge namespace at every
// wall-clock :00 and :30 (as a systemd timer with OnCalendar=*:*:0/30
// would), under bash -x so that its `wg set` calls are seen and counted.
type reresolveLoop struct {
	l      *lab.Lab
	every  time.Duration
	stopc  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	acts   []Action
	runs   int
	cpu    time.Duration // user+system of every run, children included
	maxRSS int64         // KiB, the largest run
	errs   []string
}

func startReresolve(l *lab.Lab, every time.Duration) (*reresolveLoop, error) {
	if _, err := os.Stat(ReresolveScript); err != nil {
		return nil, fmt.Errorf("reresolve-dns.sh: %w (apt-get install --no-install-recommends wireguard-tools)", err)
	}
	r := &reresolveLoop{l: l, every: every, stopc: make(chan struct{})}
	r.wg.Add(1)
	go r.loop()
	return r, nil
}

func (r *reresolveLoop) loop() {
	defer r.wg.Done()
	for {
		now := time.Now()
		next := now.Truncate(r.every).Add(r.every)
		select {
		case <-r.stopc:
			return
		case <-time.After(next.Sub(now)):
		}
		r.once()
	}
}

func (r *reresolveLoop) once() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Sourced into one traced bash that then prints its own peak RSS:
	// rusage's ru_maxrss of a child forked from this (large) Go process
	// counts the parent's pages from before exec, so it cannot be used.
	cmd := r.l.Command(ctx, lab.Edge, "bash", "-xc", `. "$0" "$1"; grep '^VmHWM:' /proc/$$/status >&2`,
		ReresolveScript, r.l.EdgeWGConfig())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	at := time.Now()
	err := cmd.Run()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	if ps := cmd.ProcessState; ps != nil {
		r.cpu += ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s: %v: %s", at.Format(time.TimeOnly), err, lastLine(stderr.String())))
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib); err == nil && kib > r.maxRSS {
				r.maxRSS = kib
			}
		}
		if strings.HasPrefix(strings.TrimLeft(line, "+"), " wg set ") {
			r.acts = append(r.acts, Action{At: at, What: "wg-set-endpoint", Target: r.l.EdgeWG(), Tunnel: true})
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (r *reresolveLoop) actions(from time.Time) []Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Action
	for _, a := range r.acts {
		if !a.At.Before(from) {
			out = append(out, a)
		}
	}
	return out
}

func (r *reresolveLoop) detected(t time.Time) (time.Time, string, bool) {
	a := r.actions(t)
	if len(a) == 0 {
		return time.Time{}, "", false
	}
	return a[0].At, "reresolve-dns.sh set the endpoint", true
}

func (r *reresolveLoop) events() []Event { return nil }

func (r *reresolveLoop) stop() error {
	close(r.stopc)
	r.wg.Wait()
	return nil
}

// usage is the loop's cost so far: runs, CPU and the largest run's RSS.
func (r *reresolveLoop) usage() (runs int, cpu time.Duration, maxRSSKiB int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs, r.cpu, r.maxRSS
}

// agentRun is edgeheal plus the cloud subscriber that records its reports.
type agentRun struct {
	a     *Agent
	cloud *Cloud
	wg    string // the tunnel interface
}

func startEdgeheal(ctx context.Context, l *lab.Lab, binary, dir string, p ConfigParams) (*agentRun, error) {
	cl := &Cloud{}
	if err := cl.Start(ctx, l); err != nil {
		return nil, err
	}
	a, err := StartAgent(ctx, l, AgentOptions{Binary: binary, Dir: dir, Params: p})
	if err != nil {
		cl.Stop()
		return nil, err
	}
	return &agentRun{a: a, cloud: cl, wg: l.EdgeWG()}, nil
}

// detectKinds are the event kinds that say edgeheal noticed a problem.
var detectKinds = map[string]bool{"incident": true, "offload-drift": true, "workload": true, "degraded": true}

// The figures come from the daemon's own log of its events (every event
// is logged when it is emitted): the cloud receives them only once the
// report path works again, which after a long blackhole can be after the
// scenario ends.
func (r *agentRun) actions(from time.Time) []Action {
	return agentActions(LogEvents(r.a.Logs()), from, r.wg)
}

func (r *agentRun) detected(t time.Time) (time.Time, string, bool) {
	return agentDetected(LogEvents(r.a.Logs()), t)
}

// agentActions are the action events at or after from.
func agentActions(evs []Event, from time.Time, wg string) []Action {
	var out []Action
	for _, e := range evs {
		if e.Kind != "action" || e.Time.Before(from) {
			continue
		}
		out = append(out, Action{At: e.Time, What: e.Action, Target: e.Target, Tunnel: e.TunnelAction(wg)})
	}
	return out
}

// agentDetected is the first event at or after t that says the agent
// noticed a problem.
func agentDetected(evs []Event, t time.Time) (time.Time, string, bool) {
	for _, e := range evs {
		if e.Time.Before(t) {
			continue
		}
		if detectKinds[e.Kind] || e.Kind == "action" {
			return e.Time, e.Kind + ": " + e.Summary, true
		}
	}
	return time.Time{}, "", false
}

// LogEvents extracts the events from the daemon's log: the lines of its
// "events" component (time, msg = summary, event_id, kind, target, action,
// result, ts). The time is the event's own (ts); a log without it (an
// older daemon) gives the time the line was logged.
func LogEvents(lines []LogLine) []Event {
	var out []Event
	for _, ll := range lines {
		if ll.Attrs["component"] != "events" {
			continue
		}
		str := func(k string) string { s, _ := ll.Attrs[k].(string); return s }
		var e Event
		e.ID, e.Time, e.Kind, e.Target = str("event_id"), ll.Time, str("kind"), str("target")
		stamped := false
		if ts, err := time.Parse(time.RFC3339Nano, str("ts")); err == nil {
			e.Time, stamped = ts, true // the event's own time: the recorder logs it when it records it
		}
		e.Action, e.Result, e.Summary = str("action"), str("result"), ll.Msg
		if d, ok := ll.Attrs["duration_seconds"].(float64); ok {
			e.Duration = d
			if e.Kind == "action" && !stamped {
				// Action events are logged when the action is done; their
				// time is when it started.
				e.Time = e.Time.Add(-time.Duration(d * float64(time.Second)))
			}
		}
		out = append(out, e)
	}
	return out
}

func (r *agentRun) events() []Event { return r.cloud.Events() }

func (r *agentRun) stop() error {
	err := r.a.Stop(10 * time.Second)
	r.cloud.Stop()
	if err != nil {
		return fmt.Errorf("stopping edgeheal (log %s): %w", r.a.LogPath(), err)
	}
	return nil
}

// startContender attaches the contender to a fresh lab.
func startContender(ctx context.Context, l *lab.Lab, contender string, o Options, dir string) (running, error) {
	switch contender {
	case None, Keepalive25:
		return passive{}, nil
	case MTUProbing:
		// Per namespace, so the machine's own stays as it is.
		for _, n := range []lab.Node{lab.Pod, lab.Edge, lab.Cloud} {
			if err := l.Sysctl(n, "net/ipv4/tcp_mtu_probing", "1"); err != nil {
				return nil, err
			}
		}
		return passive{}, nil
	case Reresolve:
		return startReresolve(l, o.ReresolveEvery)
	case Edgeheal:
		p := o.Edgeheal
		p.Node = "bench-" + l.Prefix()
		p.StateDir = filepath.Join(dir, "state")
		return startEdgeheal(ctx, l, o.Binary, dir, p)
	}
	return nil, fmt.Errorf("unknown contender %q", contender)
}
