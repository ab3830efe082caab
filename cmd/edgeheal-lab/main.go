// Command edgeheal-lab runs edgeheal's network-namespace lab by hand: up,
// status, fault, exec and down. `up` leaves a detached supervisor process
// that owns the lab (wireguard-go devices, the modem relay, the broker and
// telemetry); the other subcommands talk to it over a unix socket in the
// run directory, and `down` ends it and removes everything the lab made.
//
// It needs root. See the README, "Lab".
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

const usage = `usage: edgeheal-lab [--run-dir DIR] COMMAND [ARGS]

commands:
  up [--broker embedded|mosquitto] [--offload on|off] [--keepalive DUR]
     [--rate N] [--no-telemetry] [--prefix P] [--force] [--foreground]
                         build the lab and leave it running
  status [--json]        offload, WireGuard peers, UdpInCsumErrors, telemetry
  fault KIND [ARGS] [--for DUR]
                         pass | blackhole | loss PCT | delay DUR [JITTER] |
                         replug | offload on|off | broker-stop | broker-start |
                         restart-cloud-wg | move-endpoint
  exec NODE -- CMD...    run CMD in pod, edge, modem or cloud
  env                    the lab's names and addresses as shell variables
  down                   stop the lab and remove everything it created
  demo [FLAGS]           edgeheal heals the lab's faults, with a live timeline
  bench [FLAGS]          scenarios x contenders; results in bench/results
  sweep [PREFIX...]      list the labs on this machine (running or left by an
                         interrupted test), or remove those named

The run directory (default /run/edgeheal-lab) holds state.json, the control
socket and the supervisor's log, so separate invocations find the same lab.
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "edgeheal-lab:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("edgeheal-lab", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	runDir := fs.String("run-dir", lab.DefaultRunRoot, "run directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command")
	}
	d := dirs(*runDir)
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if os.Geteuid() != 0 && cmd != "help" && cmd != "-h" && cmd != "--help" {
		return fmt.Errorf("%s needs root (namespaces, TUN, AF_PACKET): try sudo", cmd)
	}
	switch cmd {
	case "up":
		return up(d, rest, stdout)
	case "supervise": // hidden: the detached process `up` starts
		return supervise(d, nil)
	case "down":
		return down(d, stdout)
	case "status":
		return status(d, rest, stdout)
	case "fault":
		return fault(d, rest, stdout)
	case "exec":
		return execIn(d, rest)
	case "env":
		return env(d, stdout)
	case "sweep":
		return sweep(rest, stdout)
	case "demo":
		return demoCmd(rest, stdout)
	case "bench":
		return benchCmd(rest, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", cmd)
}

// dirs names the files of a run directory.
type dirs string

func (d dirs) state() string   { return filepath.Join(string(d), "state.json") }
func (d dirs) options() string { return filepath.Join(string(d), "options.json") }
func (d dirs) socket() string  { return filepath.Join(string(d), "control.sock") }
func (d dirs) log() string     { return filepath.Join(string(d), "supervisor.log") }

// state is what the supervisor writes once the lab is up.
type state struct {
	PID       int       `json:"pid"`
	Prefix    string    `json:"prefix"`
	LabRunDir string    `json:"lab_run_dir"`
	Started   time.Time `json:"started"`
	UpSeconds float64   `json:"up_seconds"`
	Info      lab.Info  `json:"info"`
}

// options is what `up` hands to the supervisor.
type options struct {
	Prefix      string         `json:"prefix"`
	Broker      lab.BrokerKind `json:"broker"`
	OffloadOff  bool           `json:"offload_off"`
	Keepalive   time.Duration  `json:"keepalive"`
	Rate        int            `json:"rate"`
	NoTelemetry bool           `json:"no_telemetry"`
}

func readState(d dirs) (state, error) {
	var s state
	b, err := os.ReadFile(d.state())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return s, fmt.Errorf("no lab in %s (run `edgeheal-lab up`)", d)
		}
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("reading %s: %w", d.state(), err)
	}
	return s, nil
}

// stale reports what of a previous lab is still in the run directory.
func stale(d dirs) []string {
	var out []string
	for _, p := range []string{d.state(), d.options(), d.socket()} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func up(d dirs, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	broker := fs.String("broker", "embedded", "embedded or mosquitto")
	offload := fs.String("offload", "on", "edge uplink TX checksum offload at start: on (the fault) or off")
	keepalive := fs.Duration("keepalive", 0, "edge peer PersistentKeepalive (0: off, as Flannel)")
	rate := fs.Int("rate", 20, "telemetry messages per second")
	noTel := fs.Bool("no-telemetry", false, "do not start telemetry")
	prefix := fs.String("prefix", "", "name prefix (2-7 of [a-z0-9]); default random")
	force := fs.Bool("force", false, "remove a stale lab in the run directory first")
	fg := fs.Bool("foreground", false, "run the lab in this process until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *offload != "on" && *offload != "off" {
		return fmt.Errorf("--offload %q: want on or off", *offload)
	}
	if left := stale(d); len(left) > 0 {
		if !*force {
			return fmt.Errorf("a lab exists in %s (%s): run `edgeheal-lab down`, or `up --force`", d, strings.Join(left, ", "))
		}
		if err := down(d, io.Discard); err != nil {
			return fmt.Errorf("removing the stale lab: %w", err)
		}
	}
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return err
	}
	if *prefix == "" {
		*prefix = randomPrefix() // known before start, so down can sweep a failed start
	}
	o := options{
		Prefix: *prefix, Broker: lab.BrokerKind(*broker), OffloadOff: *offload == "off",
		Keepalive: *keepalive, Rate: *rate, NoTelemetry: *noTel,
	}
	b, _ := json.Marshal(o)
	if err := os.WriteFile(d.options(), b, 0o644); err != nil {
		return err
	}
	if *fg {
		return supervise(d, func(s state) {
			printUp(stdout, d, s)
			fmt.Fprintln(stdout, "Ctrl-C stops the lab and removes everything.")
		})
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(d.log(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	c := exec.Command(self, "--run-dir", string(d), "supervise")
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survives the terminal
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(d.log())
			_ = down(d, io.Discard)
			return fmt.Errorf("the supervisor exited (%v):\n%s", err, log)
		case <-sig:
			_ = down(d, io.Discard)
			return errors.New("interrupted: lab removed")
		case <-deadline:
			_ = down(d, io.Discard)
			return errors.New("the lab did not come up within 60 s: removed")
		case <-time.After(50 * time.Millisecond):
		}
		s, err := readState(d)
		if err != nil {
			continue
		}
		printUp(stdout, d, s)
		return nil
	}
}

func printUp(w io.Writer, d dirs, s state) {
	fmt.Fprintf(w, "lab %s up in %.2fs (supervisor pid %d, run dir %s)\n", s.Prefix, s.UpSeconds, s.PID, d)
	printInfo(w, s.Info)
}

func printInfo(w io.Writer, in lab.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range lab.Nodes {
		fmt.Fprintf(tw, "  netns %s\t%s\n", n, in.Netns[n])
	}
	fmt.Fprintf(tw, "  edge uplink\t%s (%s)\n", in.EdgeUplink, in.EdgeUplinkAddr)
	fmt.Fprintf(tw, "  wireguard\tedge %s (%s), cloud %s (%s)\n", in.EdgeWG, in.EdgeTunnelAddr, in.CloudWG, in.CloudTunnelAddr)
	fmt.Fprintf(tw, "  cloud\tpublic %s, endpoint %s, name %s (hosts file %s)\n", in.CloudPublicAddr, in.CloudEndpoint, in.CloudHost, in.HostsFile)
	fmt.Fprintf(tw, "  cloud public key\t%s\n", in.CloudPublicKey)
	fmt.Fprintf(tw, "  broker (%s)\tpods tcp://%s, agents tcp://%s\n", in.Broker, in.BrokerTunnel, in.BrokerPublic)
	tw.Flush()
}

func down(d dirs, stdout io.Writer) error {
	s, serr := readState(d)
	var errs []error
	if serr == nil {
		// Ask the supervisor first: it stops everything in order. If it is
		// gone or fails, the sweep below decides what is left.
		_, _ = call(d, request{Op: "down"}, 15*time.Second)
		if !waitGone(s.PID, 15*time.Second) && isSupervisor(s.PID) {
			_ = syscall.Kill(s.PID, syscall.SIGKILL)
			waitGone(s.PID, 5*time.Second)
		}
		if err := lab.Sweep(s.Prefix, s.LabRunDir); err != nil {
			errs = append(errs, err)
		}
		if left := lab.Leftovers(s.Prefix, s.LabRunDir); len(left) > 0 {
			errs = append(errs, fmt.Errorf("still left: %v", left))
		}
	} else if o, err := readOptions(d); err == nil && o.Prefix != "" {
		// up failed before the state was written, with a known prefix.
		errs = append(errs, lab.Sweep(o.Prefix, filepath.Join(string(d), o.Prefix)))
	}
	for _, p := range []string{d.state(), d.options(), d.socket(), d.log()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(string(d)) // only when empty
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if serr == nil {
		fmt.Fprintf(stdout, "lab %s down\n", s.Prefix)
	} else {
		fmt.Fprintf(stdout, "no lab in %s\n", d)
	}
	return nil
}

func readOptions(d dirs) (options, error) {
	var o options
	b, err := os.ReadFile(d.options())
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(b, &o)
}

// isSupervisor reports whether pid is an edgeheal-lab supervise process,
// so that a recycled PID is never killed.
func isSupervisor(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(b), "\x00"), "supervise")
}

func waitGone(pid int, d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		// A zombie (our own child in tests) counts as gone.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), ") Z ") {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func status(d dirs, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	resp, err := call(d, request{Op: "status"}, 10*time.Second)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(resp.Status)
	}
	printStatus(stdout, resp.Status, time.Now())
	if resp.Result != "" {
		fmt.Fprintln(os.Stderr, "edgeheal-lab: status incomplete:", resp.Result)
	}
	return nil
}

// sweep lists lab prefixes, or removes the labs named. It never guesses:
// another engineer's running lab looks just like a stale one.
func sweep(prefixes []string, stdout io.Writer) error {
	if len(prefixes) == 0 {
		for _, p := range lab.Prefixes() {
			fmt.Fprintln(stdout, p)
		}
		return nil
	}
	var errs []error
	for _, p := range prefixes {
		if err := lab.Sweep(p, filepath.Join(lab.DefaultRunRoot, p)); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "swept %s\n", p)
	}
	return errors.Join(errs...)
}

func printStatus(w io.Writer, s *lab.Status, now time.Time) {
	if s == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fault := s.Fault.String()
	if !s.FaultUntil.IsZero() {
		fault += fmt.Sprintf(" (%.0fs left)", s.FaultUntil.Sub(now).Seconds())
	}
	fmt.Fprintf(tw, "lab %s\tmodem: %s\n", s.Prefix, fault)
	var feats []string
	for name, on := range s.UplinkTxChecksum {
		feats = append(feats, fmt.Sprintf("%s: %s", name, onOff(on)))
	}
	slices.Sort(feats)
	fmt.Fprintf(tw, "edge uplink %s\t%s\n", s.Uplink, strings.Join(feats, ", "))
	for _, t := range s.Tunnels {
		for _, p := range t.Peers {
			hs := "never"
			if p.HandshakeAgeSeconds >= 0 {
				hs = fmt.Sprintf("%.1fs ago", p.HandshakeAgeSeconds)
			}
			fmt.Fprintf(tw, "%s %s peer %.8s…\thandshake %s, rx %d B, tx %d B, endpoint %s, keepalive %.0fs\n",
				t.Node, t.Interface, p.PublicKey, hs, p.RxBytes, p.TxBytes, orNone(p.Endpoint), p.KeepaliveSeconds)
		}
	}
	fmt.Fprintf(tw, "cloud UdpInCsumErrors\t%d\n", s.CloudUDPInCsumErrors)
	fmt.Fprintf(tw, "cloud public address\t%s\n", s.CloudPublicAddr)
	fmt.Fprintf(tw, "broker (%s)\t%s\n", s.Broker, map[bool]string{true: "running", false: "stopped"}[s.BrokerRunning])
	if t := s.Telemetry; t != nil {
		fmt.Fprintf(tw, "telemetry\tsent %d, received %d, late %d, loss %.2f%%, outages %d\n", t.Sent, t.Received, t.Late, t.LossPct, len(t.Outages))
		for _, o := range t.Outages {
			end := "ongoing"
			if !o.End.IsZero() {
				end = fmt.Sprintf("%.2fs", o.Duration().Seconds())
			}
			fmt.Fprintf(tw, "  outage\tfrom %s, %s, %d lost\n", o.Start.Format("15:04:05.000"), end, o.Lost)
		}
	}
	tw.Flush()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// fault parses `fault KIND [ARGS] [--for DUR]` and sends it to the supervisor.
func fault(d dirs, args []string, stdout io.Writer) error {
	var dur time.Duration
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--for" || a == "-for":
			if i+1 >= len(args) {
				return errors.New("--for needs a duration")
			}
			v, err := time.ParseDuration(args[i+1])
			if err != nil {
				return fmt.Errorf("--for: %w", err)
			}
			dur = v
			i++
		case strings.HasPrefix(a, "--for="):
			v, err := time.ParseDuration(strings.TrimPrefix(a, "--for="))
			if err != nil {
				return fmt.Errorf("--for: %w", err)
			}
			dur = v
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return errors.New("fault needs a kind: pass, blackhole, loss PCT, delay DUR [JITTER], replug, offload on|off, broker-stop, broker-start, restart-cloud-wg, move-endpoint")
	}
	req := request{Op: "fault", Kind: rest[0], Args: rest[1:], For: dur}
	if _, err := parseFault(req); err != nil { // fail before touching the lab
		return err
	}
	resp, err := call(d, req, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, resp.Result)
	return nil
}

func execIn(d dirs, args []string) error {
	if len(args) < 1 {
		return errors.New("exec needs a node: pod, edge, modem or cloud")
	}
	node := lab.Node(args[0])
	if !slices.Contains(lab.Nodes, node) {
		return fmt.Errorf("unknown node %q: want pod, edge, modem or cloud", node)
	}
	cmd := args[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 {
		cmd = []string{os.Getenv("SHELL")}
		if cmd[0] == "" {
			cmd[0] = "/bin/sh"
		}
	}
	s, err := readState(d)
	if err != nil {
		return err
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return err
	}
	// ip netns exec also mounts /etc/netns/<ns>/hosts over /etc/hosts.
	argv := append([]string{"ip", "netns", "exec", s.Prefix + "-" + string(node)}, cmd...)
	return syscall.Exec(ip, argv, os.Environ())
}

func env(d dirs, stdout io.Writer) error {
	s, err := readState(d)
	if err != nil {
		return err
	}
	in := s.Info
	vars := [][2]string{
		{"LAB_PREFIX", in.Prefix},
		{"LAB_RUN_DIR", in.RunDir},
		{"LAB_SUPERVISOR_PID", strconv.Itoa(s.PID)},
		{"LAB_POD_NETNS", in.Netns[lab.Pod]},
		{"LAB_EDGE_NETNS", in.Netns[lab.Edge]},
		{"LAB_MODEM_NETNS", in.Netns[lab.Modem]},
		{"LAB_CLOUD_NETNS", in.Netns[lab.Cloud]},
		{"LAB_EDGE_UPLINK", in.EdgeUplink},
		{"LAB_EDGE_WG", in.EdgeWG},
		{"LAB_CLOUD_WG", in.CloudWG},
		{"LAB_CLOUD_PUBLIC_KEY", in.CloudPublicKey},
		{"LAB_EDGE_TUNNEL_ADDR", in.EdgeTunnelAddr},
		{"LAB_CLOUD_TUNNEL_ADDR", in.CloudTunnelAddr},
		{"LAB_CLOUD_PUBLIC_ADDR", in.CloudPublicAddr},
		{"LAB_CLOUD_ENDPOINT", in.CloudEndpoint},
		{"LAB_CLOUD_HOST", in.CloudHost},
		{"LAB_BROKER_TUNNEL", in.BrokerTunnel},
		{"LAB_BROKER_PUBLIC", in.BrokerPublic},
	}
	for _, v := range vars {
		fmt.Fprintf(stdout, "%s=%s\n", v[0], strconv.Quote(v[1]))
	}
	return nil
}
