package workload

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/probes"
)

// diagnosis names what a workload's probes say is wrong.
type diagnosis string

// The diagnoses. Only diagOverlay leads to a tunnel action.
const (
	diagOK      diagnosis = "ok"
	diagOverlay diagnosis = "overlay"  // pod fails, host reaches the broker: the overlay/tunnel is dark
	diagPodPath diagnosis = "pod-path" // as overlay, but the tunnel's own probe answers: the pod's own path is at fault
	diagBroker  diagnosis = "broker"   // both fail and the broker answered the host with a failure (refused, tls, ...)
	diagUplink  diagnosis = "uplink"   // both fail and the host got no answer (timeout, no-route, dns)
	diagAuth    diagnosis = "auth"     // the broker refused the credentials: configuration, not network
	diagPodOnly diagnosis = "pod-failed"
	diagPathMTU diagnosis = "path-mtu" // TCP connects, the TLS handshake stalls without an alert: full-size packets are lost
	diagNoPod   diagnosis = "no-pod"
	// diagUnknown: a probe could not be made. Never acted on; the
	// workload's state is left as it was.
	diagUnknown diagnosis = "unknown"
)

// observation is one round's input to the diagnosis.
type observation struct {
	ResolveErr error          // resolving the pod's namespace; wraps probes.ErrNoPod when no pod matches
	Pod        probes.Result  // the probe from the pod's namespace
	PodErr     error          // the pod probe could not be made
	Host       *probes.Result // the probe from the host; nil when no host_broker is configured
	HostErr    error          // the host probe could not be made
}

// diagnose is the whole diagnosis, a pure function: it tells an
// overlay failure (pod fails, host succeeds) from a broker or uplink
// failure (both fail), and says why in a line an operator reads.
func diagnose(o observation) (diagnosis, string) {
	switch {
	case errors.Is(o.ResolveErr, probes.ErrNoPod):
		return diagNoPod, o.ResolveErr.Error()
	case o.ResolveErr != nil:
		return diagUnknown, "resolving the pod's network namespace: " + o.ResolveErr.Error()
	case o.PodErr != nil:
		return diagUnknown, "probe from the pod could not be made: " + o.PodErr.Error()
	case o.Pod.OK():
		return diagOK, fmt.Sprintf("connack from the pod in %s", round(o.Pod.Latency))
	case o.Pod.Class == probes.ClassAuth:
		return diagAuth, "the broker refused the credentials from the pod: " + o.Pod.Detail
	case o.Pod.Class == probes.ClassProtocol:
		// Something answered, and broke MQTT: never a dark overlay.
		return diagBroker, "what answered the pod is at fault, not the path: " + o.Pod.Detail
	case o.Pod.HandshakeStalled:
		return diagPathMTU, pathMTUText(o)
	case o.Host == nil && o.HostErr == nil:
		return diagPodOnly, fmt.Sprintf("pod probe %s; no mqtt.host_broker configured, so overlay cannot be told from broker", o.Pod.Class)
	case o.HostErr != nil:
		return diagUnknown, fmt.Sprintf("pod probe %s; probe from the host could not be made: %v", o.Pod.Class, o.HostErr)
	case o.Host.OK():
		return diagOverlay, fmt.Sprintf("pod probe %s while the host reaches the broker in %s: %s", o.Pod.Class, round(o.Host.Latency), overlayOrTunnel)
	}
	switch o.Host.Class {
	case probes.ClassTimeout, probes.ClassNoRoute, probes.ClassDNS:
		return diagUplink, fmt.Sprintf("pod probe %s and host probe %s: the broker is unreachable from the host too (uplink or broker host)", o.Pod.Class, o.Host.Class)
	}
	return diagBroker, fmt.Sprintf("pod probe %s and host probe %s: the broker itself", o.Pod.Class, o.Host.Class)
}

const overlayOrTunnel = "overlay or tunnel"

// pathMTUText says why a stalled handshake points at the path MTU: every
// small packet passed (TCP connected), the first full-size one (the
// ClientHello) got nothing back, not even an alert.
func pathMTUText(o observation) string {
	s := "the pod's TCP connection to the broker opened, then its TLS handshake got no answer and no alert: " +
		"its first full-size packet (the ClientHello) is lost, the mark of a path that drops what is larger than its MTU without ICMP (a path-MTU blackhole)"
	switch {
	case o.HostErr != nil || o.Host == nil:
	case o.Host.OK():
		s += fmt.Sprintf("; the host reaches the broker in %s", round(o.Host.Latency))
	case o.Host.HandshakeStalled:
		s += "; the host's handshake stalls the same way (the uplink's path)"
	default:
		s += "; host probe " + string(o.Host.Class)
	}
	return s
}

// podPathOrOverlay refines an overlay diagnosis with the tunnel's own
// probe: a tunnel that answers carries traffic, so what fails is the pod's
// own path to it (its CNI interface, routes, a network policy), which no
// tunnel rung can fix; it is reported as such and never acted on.
func podPathOrOverlay(d diagnosis, detail string, tunnelHealthy bool, why string) (diagnosis, string) {
	if d != diagOverlay || !tunnelHealthy {
		return d, detail
	}
	detail = strings.TrimSuffix(detail, ": "+overlayOrTunnel)
	return diagPodPath, detail + ", and the tunnel carries traffic (" + why + "): the pod's own path (CNI, routes, network policy) is at fault, not the tunnel"
}

func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

// Workload states, as Check.State shows them.
const (
	stateUnknown = "unknown" // not observed yet
	stateOK      = "ok"
	stateSuspect = "suspect" // failing, fewer than misses rounds in a row
	stateDown    = "down"    // failing for misses rounds in a row
	stateNoPod   = "no-pod"
)

// workloadStatus is a workload's health state between rounds.
type status struct {
	State        string
	Diagnosis    diagnosis
	Detail       string
	Since        time.Time // when State was entered
	Bad          int       // failing rounds in a row
	Overlay      int       // overlay rounds in a row
	NamespaceID  string    // the namespace the streaks were counted in
	SuspectSent  bool      // a suspicion was reported during this down period
	LastObserved time.Time
	Blind        int // rounds in a row whose probes could not be made
	// LastGood is the last round the broker answered from the pod, Began
	// the start of the incident open now (its LastGood; zero: none open):
	// an incident runs from the last good observation, not from the round
	// that confirmed it.
	LastGood, Began time.Time
}

// nextWorkload is the workload state machine. A round whose probe could not
// be made (diagUnknown) changes nothing but the detail, and after misses such rounds the state is unknown. A namespace change
// (pod recreated) restarts the streaks. It returns the new status and
// whether the tunnel must be told (a confirmed overlay diagnosis: overlay
// for at least misses rounds in a row).
func next(s status, d diagnosis, detail, nsID string, misses int, now time.Time) (status, bool) {
	if misses < 1 {
		misses = 1
	}
	if d == diagUnknown {
		// Nothing was observed: no streak moves. After misses such rounds
		// the workload's state is unknown, not what it was last seen as.
		s.Detail = detail
		s.Blind++
		if s.Blind >= misses && s.State != stateUnknown {
			s.State, s.Since, s.Diagnosis = stateUnknown, now, ""
		}
		return s, false
	}
	s.Blind = 0
	if nsID != "" && nsID != s.NamespaceID {
		s.Bad, s.Overlay, s.NamespaceID = 0, 0, nsID
	}
	s.Diagnosis, s.Detail, s.LastObserved = d, detail, now
	var state string
	switch d {
	case diagOK:
		s.Bad, s.Overlay = 0, 0
		s.LastGood = now
		state = stateOK
	case diagNoPod:
		s.Bad, s.Overlay = 0, 0
		state = stateNoPod
	default:
		s.Bad++
		if d == diagOverlay {
			s.Overlay++
		} else {
			s.Overlay = 0
		}
		state = stateSuspect
		if s.Bad >= misses {
			state = stateDown
		}
	}
	if state != s.State {
		s.State, s.Since = state, now
		if state != stateDown {
			s.SuspectSent = false
		}
		switch {
		case state == stateDown && !s.LastGood.IsZero():
			s.Began = s.LastGood
		case state == stateDown:
			s.Began = now
		default:
			s.Began = time.Time{}
		}
	}
	return s, d == diagOverlay && s.Overlay >= misses
}
