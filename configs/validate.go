package configs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/edgeheal/edgeheal/broker"
)

// Validate reports every problem of c at once (errors.Join of Problem
// values), each with the file the value came from, its key path and the
// reason. It does not touch the system: whether a link or file exists is
// the agent's business at run time.
func (c *Config) Validate() error {
	v := validator{c: c}
	v.all()
	return errors.Join(v.problems...)
}

type validator struct {
	c        *Config
	problems []error
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{File: v.c.Origins.Blame(path).File, Path: path, Reason: fmt.Sprintf(format, args...)})
}

// fmtDur writes whole seconds as "70000s", the way operators write them.
func fmtDur(d Duration) string {
	if d.D()%time.Second == 0 {
		return strconv.FormatInt(int64(d.D()/time.Second), 10) + "s"
	}
	return d.String()
}

func (v *validator) durRange(path string, d Duration, lo, hi time.Duration) {
	if d.D() < lo || (hi > 0 && d.D() > hi) {
		bound := fmtDur(Duration(hi))
		if hi == 0 {
			bound = ""
		}
		low := fmtDur(Duration(lo))
		if lo == 0 {
			low = "0"
		}
		v.add(path, "%s is out of range (%s..%s)", fmtDur(d), low, bound)
	}
}

var (
	nameRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	unitRe     = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]+\.(service|target|socket|mount|timer|path|scope|slice)$`)
	hostnameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)
)

func (v *validator) all() {
	c := v.c
	if c.Version != Version {
		v.add("version", "version %d is not supported: this build reads version %d", c.Version, Version)
	}
	switch {
	case c.Node.Name == "":
		v.add("node.name", "empty, and the hostname could not be read: set it")
	case strings.ContainsAny(c.Node.Name, "/+#") || !nameRe.MatchString(c.Node.Name):
		v.add("node.name", "%q cannot be used in MQTT topics: use letters, digits, '.', '_' and '-'", c.Node.Name)
	}
	if c.Node.Site != "" && !nameRe.MatchString(c.Node.Site) {
		v.add("node.site", "%q: use letters, digits, '.', '_' and '-'", c.Node.Site)
	}
	v.durRange("interval", c.Interval, 100*time.Millisecond, time.Hour)
	for i, u := range c.Uplinks {
		v.uplink(fmt.Sprintf("uplinks[%d]", i), u)
	}
	ifaces := map[string]int{}
	for i, t := range c.Tunnels {
		p := fmt.Sprintf("tunnels[%d]", i)
		if j, dup := ifaces[t.Interface]; dup && t.Interface != "" {
			v.add(p+".interface", "%q is already configured in tunnels[%d]", t.Interface, j)
		}
		ifaces[t.Interface] = i
		v.tunnel(p, t)
	}
	names := map[string]int{}
	for i, w := range c.Workloads {
		p := fmt.Sprintf("workloads[%d]", i)
		if j, dup := names[w.Name]; dup && w.Name != "" {
			v.add(p+".name", "%q is already used by workloads[%d]", w.Name, j)
		}
		names[w.Name] = i
		v.workload(p, w, ifaces)
	}
	v.restartUnits(c)
	v.report("report", c.Report)
	v.policy("policy", c.Policy)
	v.kubernetes("kubernetes", c.Kubernetes)
}

func (v *validator) uplink(p string, u Uplink) {
	switch {
	case u.Name == "":
		v.add(p+".name", "empty: give a link name, a glob such as wwan*, or %s", DefaultRoute)
	case u.Name == DefaultRoute:
	default:
		if _, err := path.Match(u.Name, ""); err != nil {
			v.add(p+".name", "%q is not a valid glob: %v", u.Name, err)
		} else if why := linkNameProblem(u.Name, true); why != "" {
			v.add(p+".name", "%q %s", u.Name, why)
		}
	}
	if u.Unit != "" && !unitRe.MatchString(u.Unit) {
		v.add(p+".unit", "%q is not a systemd unit name (e.g. ModemManager.service)", u.Unit)
	}
	if u.TxChecksum != "off" && u.TxChecksum != "leave" {
		v.add(p+".tx_checksum", "%q: must be off or leave", u.TxChecksum)
	}
	names := make([]string, 0, len(u.Features))
	for name := range u.Features {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if state := u.Features[name]; state != "on" && state != "off" {
			v.add(p+".features."+name, "%q: must be on or off", state)
		}
	}
}

// linkNameProblem says why name can never be (or, as a glob, match) a
// Linux link name, "" when it can: the kernel's rules (at most 15 bytes,
// not "." or "..", no '/', ':' or white space) and no control character.
// A glob's length is the shortest name it matches.
func linkNameProblem(name string, glob bool) string {
	const rule = "(at most 15 bytes, not . or .., no '/', ':', white space or control characters)"
	if name == "." || name == ".." {
		return "is not a valid link name " + rule
	}
	for _, r := range name {
		if r == '/' || r == ':' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Sprintf("is not a valid link name: it holds %q %s", r, rule)
		}
	}
	n := len(name)
	if glob {
		n = globMinLen(name)
	}
	if n > 15 {
		return "is not a valid link name: longer than one can be " + rule
	}
	return ""
}

// globMinLen is the length of the shortest name a path.Match pattern
// matches: '*' matches nothing, '?' and a [...] class one character.
func globMinLen(pat string) int {
	n := 0
	for i := 0; i < len(pat); i++ {
		switch pat[i] {
		case '*':
		case '\\':
			i++
			n++
		case '[':
			for i++; i < len(pat) && pat[i] != ']'; i++ {
				if pat[i] == '\\' {
					i++
				}
			}
			n++
		default:
			n++
		}
	}
	return n
}

func (v *validator) tunnel(p string, t Tunnel) {
	switch {
	case t.Interface == "":
		v.add(p+".interface", "empty: name the WireGuard interface, e.g. flannel-wg")
	default:
		if why := linkNameProblem(t.Interface, false); why != "" {
			v.add(p+".interface", "%q %s", t.Interface, why)
		}
	}
	if !t.Peers.All {
		if len(t.Peers.Keys) == 0 {
			v.add(p+".peers", `empty list: write "all" or list public keys`)
		}
		for i, k := range t.Peers.Keys {
			if b, err := base64.StdEncoding.DecodeString(k); err != nil || len(b) != 32 {
				v.add(fmt.Sprintf("%s.peers[%d]", p, i), "%q is not a WireGuard public key (44 characters of base64)", k)
			}
		}
	}
	ka := t.PersistentKeepalive
	v.durRange(p+".persistent_keepalive", ka, 0, 65535*time.Second)
	if ka.D()%time.Second != 0 {
		v.add(p+".persistent_keepalive", "%s: WireGuard keepalive is whole seconds", ka)
	}
	if t.EndpointHost != "" {
		v.endpointHost(p+".endpoint_host", t.EndpointHost)
	}
	v.durRange(p+".stale_after", t.StaleAfter, 0, 24*time.Hour)
	if t.StaleAfter > 0 && t.StaleAfter.D() <= 180*time.Second {
		v.add(p+".stale_after", "%s would flag healthy tunnels: a live session's handshake age reaches 120-180s between rekeys; use more than 180s (default 210s) or 0s to turn the signal off", fmtDur(t.StaleAfter))
	}
	v.durRange(p+".rx_silence", t.RxSilence, 0, 24*time.Hour)
	if t.Probe.Target != "" {
		if err := checkProbeTarget(t.Probe.Target); err != nil {
			v.add(p+".probe.target", "%v", err)
		}
	}
	if t.HostCheck != "" {
		if err := checkProbeTarget(t.HostCheck); err != nil {
			v.add(p+".host_check", "%v", err)
		}
	}
	v.durRange(p+".probe.interval", t.Probe.Interval, 100*time.Millisecond, time.Hour)
	v.durRange(p+".probe.timeout", t.Probe.Timeout, 10*time.Millisecond, time.Minute)
	if t.Probe.Timeout > t.Probe.Interval && t.Probe.Interval > 0 {
		v.add(p+".probe.timeout", "%s is longer than probe.interval %s: probes would overlap", fmtDur(t.Probe.Timeout), fmtDur(t.Probe.Interval))
	}
	if t.Probe.Misses < 1 || t.Probe.Misses > 100 {
		v.add(p+".probe.misses", "%d is out of range (1..100)", t.Probe.Misses)
	}
	seen := map[string]bool{}
	for i, r := range t.Heal {
		rp := fmt.Sprintf("%s.heal[%d]", p, i)
		switch {
		case !contains(HealRungs, r):
			v.add(rp, "unknown rung %q (known: %s)", r, strings.Join(HealRungs, ", "))
		case seen[r]:
			v.add(rp, "%q is listed twice", r)
		}
		seen[r] = true
	}
	if _, err := ParsePortRange(t.RebindPorts); err != nil {
		v.add(p+".rebind_ports", "%v", err)
	}
	v.pathMTU(p+".path_mtu", t)
	if t.Unit != "" && !unitRe.MatchString(t.Unit) {
		v.add(p+".unit", "%q is not a systemd unit name (e.g. k3s-agent.service)", t.Unit)
	}
}

// pathMTU checks a tunnel's path_mtu: its targets are ICMP (a sized echo
// is what measures a path). A tunnel with neither path_mtu.target nor
// probe.target is valid: its check says it has nothing to probe.
func (v *validator) pathMTU(p string, t Tunnel) {
	m := t.PathMTU
	for _, f := range []struct{ key, target string }{{"target", m.Target}, {"uplink_target", m.UplinkTarget}} {
		if f.target == "" {
			continue
		}
		if err := checkProbeTarget(f.target); err != nil {
			v.add(p+"."+f.key, "%v", err)
		} else if !strings.HasPrefix(f.target, "icmp://") {
			v.add(p+"."+f.key, "%q: the path MTU is measured with ICMP echoes of given sizes; write icmp://IP", f.target)
		}
	}
	v.durRange(p+".interval", m.Interval, 500*time.Millisecond, time.Hour)
	v.durRange(p+".idle_interval", m.IdleInterval, time.Minute, 24*time.Hour)
	if m.IdleInterval < m.Interval {
		v.add(p+".idle_interval", "%s is shorter than interval (%s): the idle interval is the longer one", fmtDur(m.IdleInterval), fmtDur(m.Interval))
	}
	if m.ChecksPerHour < 1 || m.ChecksPerHour > 7200 {
		v.add(p+".checks_per_hour", "%d is out of range (1..7200)", m.ChecksPerHour)
	}
	v.durRange(p+".relax_after", m.RelaxAfter, 0, 24*time.Hour)
}

// checkProbeTarget accepts tcp://ip:port and icmp://ip.
func checkProbeTarget(target string) error {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		return fmt.Errorf("%q: write tcp://IP:PORT or icmp://IP", target)
	}
	switch scheme {
	case "tcp":
		ap, err := netip.ParseAddrPort(rest)
		if err != nil || ap.Port() == 0 {
			return fmt.Errorf("%q: tcp probes need an IP address and a port, e.g. tcp://10.42.0.1:6443", target)
		}
	case "icmp":
		if _, err := netip.ParseAddr(rest); err != nil {
			return fmt.Errorf("%q: icmp probes need an IP address, e.g. icmp://10.42.0.1", target)
		}
	default:
		return fmt.Errorf("%q: unknown scheme %q (tcp or icmp)", target, scheme)
	}
	return nil
}

func (v *validator) workload(p string, w Workload, tunnels map[string]int) {
	if w.Name == "" || !nameRe.MatchString(w.Name) {
		v.add(p+".name", "%q: give a name of letters, digits, '.', '_' and '-' (it appears in /readyz/workload/<name>)", w.Name)
	}
	hasPod := w.Pod.Name != "" || len(w.Pod.Labels) > 0
	sources := 0
	for _, set := range []bool{hasPod, w.Netns != "", w.PID != 0} {
		if set {
			sources++
		}
	}
	switch {
	case sources == 0:
		v.add(p, "say where the pod's network namespace is: pod (namespace plus name or labels), netns, or pid")
	case sources > 1:
		v.add(p, "pod, netns and pid are alternatives: set only one")
	}
	if hasPod {
		if w.Pod.Namespace == "" {
			v.add(p+".pod.namespace", "empty: pods are chosen by namespace plus name or labels")
		}
		if w.CRISocket == "" || !filepath.IsAbs(w.CRISocket) {
			v.add(p+".cri_socket", "%q: an absolute path to the CRI socket is needed to find pods", w.CRISocket)
		}
	}
	if w.Netns != "" && !filepath.IsAbs(w.Netns) {
		v.add(p+".netns", "%q is not an absolute path (e.g. /var/run/netns/cni-...)", w.Netns)
	}
	if w.PID < 0 {
		v.add(p+".pid", "%d is not a process id", w.PID)
	}
	if w.Tunnel != "" {
		if _, ok := tunnels[w.Tunnel]; !ok {
			v.add(p+".tunnel", "%q is not one of the configured tunnels' interfaces", w.Tunnel)
		}
	}
	v.durRange(p+".interval", w.Interval, 100*time.Millisecond, time.Hour)
	if w.Misses < 1 || w.Misses > 100 {
		v.add(p+".misses", "%d is out of range (1..100)", w.Misses)
	}
	if w.MQTT.Broker == "" {
		v.add(p+".mqtt.broker", "empty: the broker address as the pod reaches it, e.g. tcp://10.43.0.10:1883")
	} else {
		v.brokerURL(p+".mqtt.broker", w.MQTT.Broker, w.MQTT.TLS)
	}
	if w.MQTT.HostBroker != "" {
		v.brokerURL(p+".mqtt.host_broker", w.MQTT.HostBroker, w.MQTT.TLS)
	}
	v.durRange(p+".mqtt.timeout", w.MQTT.Timeout, 10*time.Millisecond, time.Minute)
	if w.Interval > 0 && w.MQTT.Timeout > w.Interval {
		v.add(p+".mqtt.timeout", "%s is longer than interval %s: probes would overlap", fmtDur(w.MQTT.Timeout), fmtDur(w.Interval))
	}
	v.credentials(p+".mqtt", w.MQTT.Username, w.MQTT.PasswordFile, w.MQTT.TLS)
}

func (v *validator) credentials(p, user, passwordFile string, tls TLS) {
	if passwordFile != "" && !filepath.IsAbs(passwordFile) {
		v.add(p+".password_file", "%q is not an absolute path", passwordFile)
	}
	if passwordFile != "" && user == "" {
		v.add(p+".username", "empty while password_file is set")
	}
	if (tls.Cert == "") != (tls.Key == "") {
		v.add(p+".tls", "cert and key go together: set both for mutual TLS, or neither")
	}
	for _, f := range []struct{ key, file string }{{"ca", tls.CA}, {"cert", tls.Cert}, {"key", tls.Key}} {
		if f.file != "" && !filepath.IsAbs(f.file) {
			v.add(p+".tls."+f.key, "%q is not an absolute path", f.file)
		}
	}
}

// brokerURL reports a broker URL that broker.ParseURL refuses, and TLS
// settings next to a plain URL: they would be ignored, and a node that
// was meant to use TLS would not.
func (v *validator) brokerURL(p, s string, t TLS) {
	b, err := broker.ParseURL(s)
	switch {
	case err != nil:
		v.add(p, "%v", err)
	case !b.TLS && t.Enabled():
		v.add(p, "%q is plain %s:// but tls is configured: use ssl://, tls:// or mqtts://", s, b.Scheme)
	}
}

func (v *validator) report(p string, r Report) {
	m := r.MQTT
	if m.Broker != "" {
		v.brokerURL(p+".mqtt.broker", m.Broker, m.TLS)
	}
	switch {
	case m.TopicPrefix == "":
		v.add(p+".mqtt.topic_prefix", "empty: the default is edgeheal/v1")
	case strings.ContainsAny(m.TopicPrefix, "+#") || strings.HasPrefix(m.TopicPrefix, "/") || strings.HasSuffix(m.TopicPrefix, "/"):
		v.add(p+".mqtt.topic_prefix", "%q: no wildcards (+ #) and no leading or trailing '/'", m.TopicPrefix)
	}
	if strings.ContainsAny(m.ClientID, "+#/") {
		v.add(p+".mqtt.client_id", "%q: no '/', '+' or '#'", m.ClientID)
	}
	v.credentials(p+".mqtt", m.Username, m.PasswordFile, m.TLS)
	v.reportMQTT(p+".mqtt", m)
	if r.HTTP.Listen != "" {
		if _, port, err := net.SplitHostPort(r.HTTP.Listen); err != nil || port == "" {
			v.add(p+".http.listen", "%q: write host:port, e.g. 127.0.0.1:9469 (empty turns metrics and health off)", r.HTTP.Listen)
		}
	}
	if s := r.HTTP.Socket; s != "" && (!filepath.IsAbs(s) || len(s) > 107) {
		v.add(p+".http.socket", "%q: an absolute path of at most 107 bytes, e.g. /run/edgeheal/edgeheal.sock (empty turns the local API off)", s)
	}
	if r.StateDir == "" || !filepath.IsAbs(r.StateDir) {
		v.add(p+".state_dir", "%q: an absolute directory is needed for the outbox and session counter", r.StateDir)
	}
}

func (v *validator) policy(p string, pol Policy) {
	v.durRange(p+".cooldown", pol.Cooldown, 0, 24*time.Hour)
	if pol.MaxDisruptive < 0 || pol.MaxDisruptive > 1000 {
		v.add(p+".max_disruptive", "%d is out of range (0..1000)", pol.MaxDisruptive)
	}
	v.durRange(p+".window", pol.Window, time.Second, 7*24*time.Hour)
	v.durRange(p+".verify_timeout", pol.VerifyTimeout, 100*time.Millisecond, time.Hour)
	v.durRange(p+".resume_grace", pol.ResumeGrace, 0, 10*time.Minute)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// endpointHost checks a tunnel's endpoint_host: a DNS name, optionally
// with a port (name:port); without one the reresolve rung keeps the peer's
// current port.
func (v *validator) endpointHost(key, host string) {
	name := host
	if h, port, err := net.SplitHostPort(host); err == nil {
		name = h
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			v.add(key, "%q: the port must be 1..65535", host)
		}
	}
	if !hostnameRe.MatchString(name) {
		v.add(key, "%q is not a DNS name (or name:port)", host)
	}
}
