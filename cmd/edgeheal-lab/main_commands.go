package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// status runs `edgeheal-lab status [--json]`.
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

// printStatus prints s as a table; now dates the time left on a fault.
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
	if c := s.Carrier; c != nil {
		fmt.Fprintf(tw, "carrier NAT\tpublic %s, %d mappings of the edge, %d stuck\n", c.Public, len(c.Mappings), len(c.Stuck))
		for _, m := range c.Mappings {
			fmt.Fprintf(tw, "  mapping\t%s\n", m)
		}
		for _, m := range c.Stuck {
			fmt.Fprintf(tw, "  stuck\t%s\n", m)
		}
	}
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
		return errors.New("fault needs a kind: pass, blackhole, loss PCT, delay DUR [JITTER], mtu N, replug, offload on|off, broker-stop, broker-start, restart-cloud-wg, move-endpoint, nat-stuck, nat-clear, nat-remap")
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

// execIn runs `edgeheal-lab exec NODE -- CMD...`: it replaces this
// process with CMD inside the node's namespace (a shell without CMD).
func execIn(d dirs, args []string) error {
	if len(args) < 1 {
		return errors.New("exec needs a node: pod, edge, modem, carrier or cloud")
	}
	node := lab.Node(args[0])
	if !slices.Contains(lab.Nodes, node) && node != lab.Carrier {
		return fmt.Errorf("unknown node %q: want pod, edge, modem, carrier or cloud", node)
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

// env prints the lab's names and addresses as shell variables.
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
	if in.NAT {
		vars = append(vars, [2]string{"LAB_CARRIER_NETNS", in.Netns[lab.Carrier]})
	}
	for _, v := range vars {
		fmt.Fprintf(stdout, "%s=%s\n", v[0], strconv.Quote(v[1]))
	}
	return nil
}
