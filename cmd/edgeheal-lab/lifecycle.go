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
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// up runs `edgeheal-lab up`: it writes the lab's options into the run
// directory and starts the supervisor, detached or (--foreground) in this
// process, returning once the lab is up (or, in the foreground, down).
func up(d dirs, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	broker := fs.String("broker", "embedded", "embedded or mosquitto")
	offload := fs.String("offload", "on", "edge uplink TX checksum offload at start: on (the fault) or off")
	keepalive := fs.Duration("keepalive", 0, "edge peer PersistentKeepalive (0: off, as Flannel)")
	rate := fs.Int("rate", 20, "telemetry messages per second")
	nat := fs.Bool("nat", false, "put a carrier NAT (nftables masquerade, real conntrack) between the modem and the cloud")
	listenPort := fs.Int("listen-port", 0, "the edge's WireGuard listen port (0: any; Flannel uses 51820)")
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
	if err := clearStaleLab(d, *force); err != nil {
		return err
	}
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return err
	}
	if *prefix == "" {
		*prefix = randomPrefix() // known before start, so down can sweep a failed start
	}
	o := options{
		Prefix: *prefix, Broker: lab.BrokerKind(*broker), OffloadOff: *offload == "off",
		Keepalive: *keepalive, Rate: *rate, NoTelemetry: *noTel, NAT: *nat, ListenPort: *listenPort,
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
	return startDetached(d, stdout)
}

// clearStaleLab refuses a run directory that still holds a lab, unless
// force says to take that lab down first.
func clearStaleLab(d dirs, force bool) error {
	left := stale(d)
	if len(left) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("a lab exists in %s (%s): run `edgeheal-lab down`, or `up --force`", d, strings.Join(left, ", "))
	}
	if err := down(d, io.Discard); err != nil {
		return fmt.Errorf("removing the stale lab: %w", err)
	}
	return nil
}

// startDetached starts `edgeheal-lab supervise` in its own session, logging
// to the run directory, and waits up to 60 s for it to write state.json.
// When the supervisor exits first, the wait times out or SIGINT/SIGTERM
// arrives, it takes down whatever was made and returns an error.
func startDetached(d dirs, stdout io.Writer) error {
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

// printUp prints that the lab is up, and its names and addresses.
func printUp(w io.Writer, d dirs, s state) {
	fmt.Fprintf(w, "lab %s up in %.2fs (supervisor pid %d, run dir %s)\n", s.Prefix, s.UpSeconds, s.PID, d)
	printInfo(w, s.Info)
}

// printInfo prints the lab's namespaces, links, addresses and keys.
func printInfo(w io.Writer, in lab.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range slices.Concat(lab.Nodes, []lab.Node{lab.Carrier}) {
		if p, ok := in.Netns[n]; ok {
			fmt.Fprintf(tw, "  netns %s\t%s\n", n, p)
		}
	}
	fmt.Fprintf(tw, "  edge uplink\t%s (%s)\n", in.EdgeUplink, in.EdgeUplinkAddr)
	fmt.Fprintf(tw, "  wireguard\tedge %s (%s), cloud %s (%s)\n", in.EdgeWG, in.EdgeTunnelAddr, in.CloudWG, in.CloudTunnelAddr)
	fmt.Fprintf(tw, "  cloud\tpublic %s, endpoint %s, name %s (hosts file %s)\n", in.CloudPublicAddr, in.CloudEndpoint, in.CloudHost, in.HostsFile)
	fmt.Fprintf(tw, "  cloud public key\t%s\n", in.CloudPublicKey)
	fmt.Fprintf(tw, "  broker (%s)\tpods tcp://%s, agents tcp://%s\n", in.Broker, in.BrokerTunnel, in.BrokerPublic)
	tw.Flush()
}

// down runs `edgeheal-lab down`: it asks the supervisor to stop the lab,
// kills it if it does not, sweeps what is left and empties the run
// directory. Without a state file it sweeps the prefix of a failed up.
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
		fmt.Fprintf(stdout, "no lab in %s (labs left by tests or a benchmark: `edgeheal-lab sweep`)\n", d)
	}
	return nil
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

// waitGone waits up to d for pid to exit and reports whether it did.
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
