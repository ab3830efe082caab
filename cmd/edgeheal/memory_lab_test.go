package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// BenchmarkLabHostileInputsMemory measures what each hostile input of the
// hardening costs the built agent in memory, with the unit's GOMEMLIMIT
// (64MiB) applied: the peak resident set (VmHWM, reset through clear_refs
// before each input) over the steady state (the resident set after a
// minute of rounds, reporting and a workload probe). The inputs: a
// workload broker whose CONNACK announces 256 MiB (and sends the zeros), a
// reporting broker that sends a 100 MB PUBLISH, a config drop-in that is a
// FIFO, one that links /dev/zero, a 16 MiB comment-only one, the largest
// one allowed (512 KiB of list items, YAML at its densest), and a workload
// password file that is a FIFO. Root: the workload probe enters a network namespace. Results go
// to docs/performance.md, "Hostile inputs".
//
//	sudo env PATH=$PATH go test -run '^$' -bench LabHostileInputsMemory -benchtime 1x ./cmd/edgeheal/
func BenchmarkLabHostileInputsMemory(b *testing.B) {
	testsupport.RequireRoot(b, "the workload probe enters a network namespace")
	bin := buildBinary(b)
	dir := b.TempDir()
	report := newMiniBroker(b)
	good := newMiniBroker(b)
	hostile := hostileWorkloadBroker(b)
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "config.yaml")
	dropin := filepath.Join(dir, "config.d", "50-input.yaml")
	writeFile(b, cfg, fmt.Sprintf(`version: 1
node: {name: mem-1}
interval: 1s
workloads:
  - name: good
    netns: /proc/%d/ns/net
    interval: 1s
    mqtt: {broker: "tcp://%s", timeout: 500ms}
report:
  mqtt: {broker: "tcp://%s", reconnect: {probe_interval: 500ms, min_delay: 500ms, max_delay: 2s, start_jitter: 0s}}
  http: {listen: "%s", socket: %s}
  state_dir: %s
`, os.Getpid(), good.addr, report.addr, freeLoopback(b), filepath.Join(dir, "edgeheal.sock"), state))
	cmd := exec.Command(bin, "run", "--config", cfg, "--state-dir", state, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=64MiB")
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	time.Sleep(60 * time.Second)
	steady := procKiB(b, pid, "VmRSS")
	b.Logf("steady state: %.1f MiB resident (GOMEMLIMIT=64MiB)", float64(steady)/1024)
	reload := func() { _ = cmd.Process.Signal(syscall.SIGHUP); time.Sleep(2 * time.Second) }
	fifo := func(p string) {
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	pwFIFO := filepath.Join(dir, "password")
	inputs := []struct {
		name        string
		apply, undo func()
	}{
		{"workload-connack-256MiB", func() {
			writeFile(b, dropin, fmt.Sprintf("workloads:\n  - name: hostile\n    netns: /proc/%d/ns/net\n    interval: 1s\n    mqtt: {broker: \"tcp://%s\", timeout: 500ms}\n", os.Getpid(), hostile))
			reload()
			time.Sleep(15 * time.Second)
		}, func() { os.Remove(dropin); reload() }},
		{"report-publish-100MB", func() {
			report.hostile.Store(true)
			report.kick()
			time.Sleep(15 * time.Second)
		}, func() { report.hostile.Store(false); time.Sleep(5 * time.Second) }},
		{"dropin-fifo", func() { fifo(dropin); reload(); reload() }, func() { os.Remove(dropin) }},
		{"dropin-dev-zero", func() {
			if err := os.Symlink("/dev/zero", dropin); err != nil {
				b.Fatal(err)
			}
			reload()
			reload()
		}, func() { os.Remove(dropin) }},
		{"dropin-16MiB-comments", func() {
			writeFile(b, dropin, strings.Repeat("# "+strings.Repeat("x", 61)+"\n", 16<<20/64))
			reload()
			reload()
		}, func() { os.Remove(dropin) }},
		{"dropin-largest-list", func() {
			var sb strings.Builder
			sb.WriteString("node: {site: s}\nuplinks:\n")
			for sb.Len() < 500<<10 { // with the main file, just within the 512 KiB the layers may hold
				sb.WriteString("  - {name: e0}\n")
			}
			writeFile(b, dropin, sb.String())
			reload()
			reload()
		}, func() { os.Remove(dropin) }},
		{"password-file-fifo", func() {
			fifo(pwFIFO)
			writeFile(b, dropin, fmt.Sprintf("workloads:\n  - name: pw\n    netns: /proc/%d/ns/net\n    interval: 1s\n    mqtt: {broker: \"tcp://%s\", timeout: 500ms, username: u, password_file: %s}\n", os.Getpid(), good.addr, pwFIFO))
			reload()
			time.Sleep(10 * time.Second)
		}, func() { os.Remove(dropin); reload() }},
	}
	for range b.N {
		for _, in := range inputs {
			time.Sleep(5 * time.Second)
			base := procKiB(b, pid, "VmRSS")
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				b.Fatal(err)
			}
			in.apply()
			peak := procKiB(b, pid, "VmHWM")
			in.undo()
			if cmd.ProcessState != nil || syscall.Kill(pid, 0) != nil {
				b.Fatalf("the agent died during %s", in.name)
			}
			over := float64(peak-min(base, steady)) / 1024
			b.Logf("%-24s resident before %.1f MiB, peak %.1f MiB: %.1f MiB over the steady state", in.name, float64(base)/1024, float64(peak)/1024, over)
			b.ReportMetric(over, "MiB-over-steady/"+in.name)
		}
	}
	b.ReportMetric(float64(steady)/1024, "MiB-steady")
}

// procKiB reads a kB field of /proc/pid/status.
func procKiB(b *testing.B, pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// miniBroker is as much of an MQTT broker as the agent's reporting session
// and probe need: CONNACK, PUBACK for QoS 1, PINGRESP. Hostile, it follows
// its CONNACK with the header of a 100 MB PUBLISH and the zeros.
type miniBroker struct {
	addr    string
	hostile atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func newMiniBroker(b *testing.B) *miniBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	m := &miniBroker{addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.mu.Lock()
			m.conns[c] = true
			m.mu.Unlock()
			go m.serve(c)
		}
	}()
	return m
}

// kick closes every connection, so the clients connect again.
func (m *miniBroker) kick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range m.conns {
		c.Close()
	}
}

func (m *miniBroker) serve(c net.Conn) {
	defer func() { m.mu.Lock(); delete(m.conns, c); m.mu.Unlock(); c.Close() }()
	r := bufio.NewReader(c)
	for {
		h, err := r.ReadByte()
		if err != nil {
			return
		}
		n, mult := 0, 1
		for {
			d, err := r.ReadByte()
			if err != nil {
				return
			}
			n += int(d&0x7f) * mult
			mult *= 128
			if d&0x80 == 0 {
				break
			}
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		switch h >> 4 {
		case 1: // CONNECT
			c.Write([]byte{0x20, 2, 0, 0})
			if m.hostile.Load() {
				c.Write([]byte{0x30, 0x80, 0xc2, 0xd7, 0x2f})
				zeros := make([]byte, 64<<10)
				for sent := 0; sent < 100_000_000; sent += len(zeros) {
					if _, err := c.Write(zeros); err != nil {
						return
					}
				}
			}
		case 3: // PUBLISH: PUBACK a QoS 1 one
			if h&0x06 == 0x02 && len(body) >= 2 {
				tl := int(binary.BigEndian.Uint16(body))
				if len(body) >= 2+tl+2 {
					c.Write([]byte{0x40, 2, body[2+tl], body[2+tl+1]})
				}
			}
		case 12: // PINGREQ
			c.Write([]byte{0xd0, 0})
		case 14: // DISCONNECT
			return
		}
	}
}

// hostileWorkloadBroker answers every CONNECT with a CONNACK that
// announces 256 MiB, and the zeros.
func hostileWorkloadBroker(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 512)
				if _, err := c.Read(buf); err != nil {
					return
				}
				c.Write([]byte{0x20, 0xff, 0xff, 0xff, 0x7f})
				zeros := make([]byte, 64<<10)
				for sent := 0; sent < 256<<20; sent += len(zeros) {
					if _, err := c.Write(zeros); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
