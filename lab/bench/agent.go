package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/localapi"
)

// Agent is edgeheal running as a child process inside the lab's edge
// namespace, started through `ip netns exec` (which execs the daemon, so
// the PID is edgeheal's own, and mounts the edge's hosts file).
type Agent struct {
	l       *lab.Lab
	cmd     *exec.Cmd
	log     *os.File
	logPath string
	socket  string // the local API's
	started time.Time
	done    chan struct{}
	err     error // valid after done is closed
}

// AgentOptions say how to start the daemon.
type AgentOptions struct {
	Binary string // the edgeheal binary
	Dir    string // where the config, the state directory and the log go
	Params ConfigParams
}

// StartAgent writes the config for l into opts.Dir, checks it with
// `edgeheal config check` and starts `edgeheal run` inside the edge
// namespace. The daemon's JSON log goes to Dir/edgeheal.log.
func StartAgent(ctx context.Context, l *lab.Lab, opts AgentOptions) (*Agent, error) {
	bin, err := filepath.Abs(opts.Binary)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("edgeheal binary: %w (build it: go build -o bin/edgeheal ./cmd/edgeheal)", err)
	}
	p := opts.Params
	p.Prefix = l.Prefix()
	if p.StateDir == "" {
		p.StateDir = filepath.Join(opts.Dir, "state")
	}
	if p.HTTPListen == "" {
		p.HTTPListen = "127.0.0.1:9469" // the edge namespace has its own loopback
	}
	if p.Socket == "" {
		p.Socket = filepath.Join(p.StateDir, "edgeheal.sock") // each lab agent its own
	}
	if err := os.MkdirAll(p.StateDir, 0o700); err != nil {
		return nil, err
	}
	cfg, err := Config(p)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(opts.Dir, "edgeheal.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, bin, "config", "check", "--config", cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("checking %s: %w: %s", cfgPath, err, bytes.TrimSpace(out))
	}
	logPath := filepath.Join(opts.Dir, "edgeheal.log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Not CommandContext: the agent is ended by Stop, gracefully.
	cmd := l.Command(context.Background(), lab.Edge, bin, "run", "--config", cfgPath, "--log-format", "json",
		"--state-dir", p.StateDir)
	cmd.Stdout, cmd.Stderr = f, f
	a := &Agent{l: l, cmd: cmd, log: f, logPath: logPath, socket: p.Socket, done: make(chan struct{})}
	a.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting edgeheal: %w", err)
	}
	go func() {
		a.err = cmd.Wait()
		f.Close()
		close(a.done)
	}()
	return a, nil
}

// PID is the daemon's process id.
func (a *Agent) PID() int { return a.cmd.Process.Pid }

// Started is when the daemon was started.
func (a *Agent) Started() time.Time { return a.started }

// LogPath is the daemon's log file.
func (a *Agent) LogPath() string { return a.logPath }

// Done is closed when the daemon has exited.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err is how the daemon exited; nil while it runs.
func (a *Agent) Err() error {
	select {
	case <-a.done:
		return a.err
	default:
		return nil
	}
}

// Stop sends SIGTERM and waits up to timeout for the daemon to exit, then
// kills it. It returns the daemon's exit error if it did not stop cleanly.
func (a *Agent) Stop(timeout time.Duration) error {
	select {
	case <-a.done:
		return a.err
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		return a.err
	case <-time.After(timeout):
		_ = a.cmd.Process.Kill()
		<-a.done
		return fmt.Errorf("edgeheal did not stop within %v after SIGTERM: killed", timeout)
	}
}

// LogLine is one entry of the daemon's JSON log.
type LogLine struct {
	Time  time.Time
	Level string
	Msg   string
	Attrs map[string]any
}

// Logs parses the daemon's JSON log so far; lines that are not JSON are
// returned with Msg set to the raw line.
func (a *Agent) Logs() []LogLine {
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		return nil
	}
	return ParseLogs(b)
}

// ParseLogs parses slog JSON lines.
func ParseLogs(b []byte) []LogLine {
	var out []LogLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			out = append(out, LogLine{Msg: string(line)})
			continue
		}
		ll := LogLine{Attrs: m}
		if s, ok := m["time"].(string); ok {
			ll.Time, _ = time.Parse(time.RFC3339Nano, s)
		}
		ll.Level, _ = m["level"].(string)
		ll.Msg, _ = m["msg"].(string)
		delete(m, "time")
		delete(m, "level")
		delete(m, "msg")
		out = append(out, ll)
	}
	return out
}

// Status fetches /v1/status from the daemon's local API (its Unix socket,
// which the host reaches whatever namespace the agent runs in). It returns
// the decoded JSON object.
func (a *Agent) Status(ctx context.Context) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var m map[string]any
	if err := localapi.New(a.socket).Get(ctx, localapi.StatusPath, &m); err != nil {
		return nil, fmt.Errorf("asking edgeheal for its status: %w", err)
	}
	return m, nil
}

// ProcSample is a process's resident memory and CPU time at one moment.
type ProcSample struct {
	At       time.Time
	RSSKiB   int64         // VmRSS
	HWMKiB   int64         // VmHWM: peak resident set
	CPU      time.Duration // user + system, of the process and its waited-for children
	Children time.Duration // cutime + cstime alone
}

// clockTick is USER_HZ, 100 on every Linux architecture edgeheal targets.
const clockTick = 100

// SampleProc reads /proc/<pid>/status and /proc/<pid>/stat.
func SampleProc(pid int) (ProcSample, error) {
	s := ProcSample{At: time.Now()}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(st), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			s.RSSKiB, _ = strconv.ParseInt(f[1], 10, 64)
		case "VmHWM:":
			s.HWMKiB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	ticks, child, err := parseStatCPU(string(b))
	if err != nil {
		return s, err
	}
	s.CPU = time.Duration(ticks) * time.Second / clockTick
	s.Children = time.Duration(child) * time.Second / clockTick
	return s, nil
}

// parseStatCPU returns utime+stime+cutime+cstime and cutime+cstime from a
// /proc/<pid>/stat line (fields 14..17; the command name may hold spaces).
func parseStatCPU(stat string) (total, children int64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("parsing /proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14 → f[11].
	if len(f) < 15 {
		return 0, 0, errors.New("parsing /proc stat: too few fields")
	}
	var v [4]int64
	for k := range v {
		v[k], err = strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing /proc stat: %w", err)
		}
	}
	return v[0] + v[1] + v[2] + v[3], v[2] + v[3], nil
}
