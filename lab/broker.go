package lab

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// broker is a running MQTT broker in the cloud namespace.
type broker interface {
	stop() error
}

// StartBroker starts the cloud's broker (Options.Broker) listening on
// every cloud address, port BrokerPort: the tunnel address for pods and the
// public address for agents. It returns once the broker accepts
// connections. Starting a running broker is a no-op.
func (l *Lab) StartBroker() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab is closed")
	}
	if l.broker != nil {
		return nil
	}
	var (
		b   broker
		err error
	)
	switch l.opts.Broker {
	case BrokerMosquitto:
		b, err = l.startMosquitto()
	default:
		b, err = l.startEmbedded()
	}
	if err != nil {
		return err
	}
	l.broker = b
	// Wait until it accepts, from where agents connect.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := l.DialIn(Cloud, fmt.Sprintf("127.0.0.1:%d", BrokerPort), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker did not accept connections: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StopBroker stops the cloud's broker; clients see their connections drop
// and new ones refused. Stopping a stopped broker is a no-op.
func (l *Lab) StopBroker() error {
	l.mu.Lock()
	b := l.broker
	l.broker = nil
	l.mu.Unlock()
	if b == nil {
		return nil
	}
	return b.stop()
}

// BrokerRunning reports whether the broker is started.
func (l *Lab) BrokerRunning() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broker != nil
}

type embedded struct{ s *mqtt.Server }

// allowAll lets every client connect and use every topic: the lab's broker
// is reachable only from inside the lab. (mochi's own auth hooks pull in a
// YAML module this repository does not carry.)
type allowAll struct{ mqtt.HookBase }

func (h *allowAll) ID() string { return "allow-all" }

func (h *allowAll) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *allowAll) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

func (h *allowAll) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

func (l *Lab) startEmbedded() (broker, error) {
	s := mqtt.New(&mqtt.Options{
		InlineClient: false,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err := s.AddHook(new(allowAll), nil); err != nil {
		return nil, fmt.Errorf("adding allow hook: %w", err)
	}
	err := l.Do(Cloud, func() error {
		return s.AddListener(listeners.NewTCP(listeners.Config{
			Type: "tcp", ID: "all", Address: fmt.Sprintf(":%d", BrokerPort),
		}))
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("listening in cloud: %w", err)
	}
	if err := s.Serve(); err != nil {
		s.Close()
		return nil, fmt.Errorf("serving mqtt: %w", err)
	}
	return embedded{s}, nil
}

// stop closes the broker, waiting at most brokerCloseWait: mochi-mqtt
// v2.7.9's Close can deadlock. Clients.GetByListener takes the clients'
// read lock twice (the second time in Len), and a client connecting in
// between waits for the write lock, so neither moves on (seen once, a lab
// benchmark of 2026-12-04 that hung 14 minutes closing a lab). A broker
// that does not close in time is left behind: its goroutines until the
// process ends, its listener's socket in the cloud namespace, which the
// lab removes all the same.
func (e embedded) stop() error { return closeWithin(e.s, brokerCloseWait) }

const brokerCloseWait = 5 * time.Second

// closeWithin closes c, or gives up waiting after d with an error.
func closeWithin(c io.Closer, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("the embedded broker did not close within %s: left behind", d)
	}
}

type mosquitto struct {
	cmd  *exec.Cmd
	done chan error
	log  *os.File
	pid  string // pid file written for Sweep
}

// mosquittoConf is the mosquitto 2.x configuration: anonymous, no
// persistence (unless Options.BrokerPersistence), no pid_file (mosquitto
// drops privileges and cannot write a root-owned one), logs to stderr.
const mosquittoConf = `listener %d
allow_anonymous true
persistence false
log_dest stderr
log_type error
log_type warning
`

func (l *Lab) startMosquitto() (broker, error) {
	bin := l.opts.MosquittoPath
	if bin == "" {
		bin = "mosquitto"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("finding mosquitto (apt-get install mosquitto): %w", err)
	}
	// The prefix is in the config path so that Sweep finds the process by
	// its command line after a crash.
	conf := filepath.Join(l.runDir, l.prefix+"-mosquitto.conf")
	text := fmt.Sprintf(mosquittoConf, BrokerPort)
	if l.opts.BrokerPersistence {
		data := filepath.Join(l.runDir, l.prefix+"-mosquitto-data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		// As root, so that it can write the root-owned directory.
		text = strings.Replace(text, "persistence false\n", "user root\npersistence true\npersistence_location "+data+"/\n", 1)
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", conf, err)
	}
	lf, err := os.OpenFile(filepath.Join(l.runDir, "mosquitto.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "-c", conf)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group, so that a Ctrl-C at the terminal reaches the
	// lab (which stops it in order) and not mosquitto directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The child inherits the namespace of the thread that forks it.
	if err := l.Do(Cloud, cmd.Start); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting mosquitto: %w", err)
	}
	m := &mosquitto{cmd: cmd, done: make(chan error, 1), log: lf, pid: filepath.Join(l.runDir, "mosquitto.pid")}
	_ = os.WriteFile(m.pid, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	go func() { m.done <- cmd.Wait() }()
	select {
	case err := <-m.done:
		lf.Close()
		b, _ := os.ReadFile(filepath.Join(l.runDir, "mosquitto.log"))
		return nil, fmt.Errorf("mosquitto exited at start: %v: %s", err, b)
	case <-time.After(50 * time.Millisecond):
	}
	return m, nil
}

// stop ends mosquitto by its PID: SIGTERM, then SIGKILL after 2 s.
func (m *mosquitto) stop() error {
	defer m.log.Close()
	defer os.Remove(m.pid)
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		return nil
	case <-time.After(2 * time.Second):
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	return nil
}
