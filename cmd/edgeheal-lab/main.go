// Command edgeheal-lab runs edgeheal's network-namespace lab by hand: up,
// status, fault, exec and down. `up` leaves a detached supervisor process
// that owns the lab (wireguard-go devices, the modem relay, the broker and
// telemetry); the other subcommands talk to it over a unix socket in the
// run directory, and `down` ends it and removes everything the lab made.
//
// It needs root. See docs/lab.md.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

const usage = `usage: edgeheal-lab [--run-dir DIR] COMMAND [ARGS]

commands:
  up [--broker embedded|mosquitto] [--offload on|off] [--keepalive DUR]
     [--nat] [--listen-port N] [--rate N] [--no-telemetry] [--prefix P]
     [--force] [--foreground]
                         build the lab and leave it running
  status [--json]        offload, WireGuard peers, UdpInCsumErrors, telemetry
  fault KIND [ARGS] [--for DUR]
                         pass | blackhole | loss PCT | delay DUR [JITTER] |
                         mtu N | replug | offload on|off | broker-stop | broker-start |
                         restart-cloud-wg | move-endpoint |
                         nat-stuck | nat-clear | nat-remap (with --nat)
  exec NODE -- CMD...    run CMD in pod, edge, modem, carrier (--nat) or cloud
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

// run parses the global flags and runs the command args name.
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
		if len(rest) > 0 {
			return fmt.Errorf("down takes no arguments (got %q): it stops the lab of the run directory; a lab a test or a benchmark left is removed with `edgeheal-lab sweep PREFIX` (`edgeheal-lab sweep` lists them)", rest)
		}
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
	NAT         bool           `json:"nat,omitempty"`
	ListenPort  int            `json:"listen_port,omitempty"`
}

// readState reads the supervisor's state.json.
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

// readOptions reads the options `up` handed to the supervisor.
func readOptions(d dirs) (options, error) {
	var o options
	b, err := os.ReadFile(d.options())
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(b, &o)
}
