package kube

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// ConditionType is the node condition edgeheal owns. True: the overlay
// carries the pods' traffic.
const ConditionType = "EdgeOverlayHealthy"

// The condition's reasons (docs/operations/kubernetes.md, "Kubernetes").
const (
	ReasonHealthy           = "Healthy"           // True: every tunnel and workload path works
	ReasonTunnelDark        = "TunnelDark"        // False: a tunnel is confirmed dark (edgeheal is repairing it)
	ReasonGaveUp            = "GaveUp"            // False: edgeheal used its budget and alerts only
	ReasonOffloadFight      = "OffloadFight"      // False: something keeps turning TX checksum offload back on
	ReasonUplinkDown        = "UplinkDown"        // False: neither the pods nor the host reach the broker: the uplink
	ReasonBrokerUnreachable = "BrokerUnreachable" // False: the broker refuses both the pods and the host
	ReasonPathMTUBlackhole  = "PathMTUBlackhole"  // False: a tunnel's path silently drops full-size packets and nothing fits traffic to it
	ReasonPathMTUClamped    = "PathMTUClamped"    // True: such a path, and edgeheal's TCP MSS clamp (and tunnel MTU) fit traffic to it
	ReasonAgentUnreachable  = "AgentUnreachable"  // Unknown: the agent's status cannot be read, or its loop stalled
	ReasonAgentStarting     = "AgentStarting"     // Unknown: the agent has not finished its first round
)

// The condition's statuses, as Kubernetes spells them.
const (
	True    = "True"
	False   = "False"
	Unknown = "Unknown"
)

// Verdict is the condition edgeheal wants on its Node, and whether the
// overlay is dark (what the taint is about: not an upstream outage, in
// which moving pods elsewhere helps nothing on this node's account).
type Verdict struct {
	Status  string
	Reason  string
	Message string
	Dark    bool
}

// Diagnose is the condition from the agent's status, a pure function.
// readErr is the failure to read the status (then st is nil); stale is how
// long the agent's loop may go without progress before its status is not
// believed. A confirmed problem wins over an unconfirmed one: checks that
// are only suspect leave the verdict as prev, so the condition moves only
// on what the agent itself has confirmed. Several problems: the worst one
// is the reason (gave up, dark, offload fight, uplink, broker), the
// message names every unhealthy target.
func Diagnose(prev Verdict, st *Status, readErr error, now time.Time, stale time.Duration) Verdict {
	switch {
	case readErr != nil:
		return Verdict{Status: Unknown, Reason: ReasonAgentUnreachable, Message: "reading the agent's status: " + readErr.Error()}
	case !st.LastProgress.IsZero() && now.Sub(st.LastProgress) > stale:
		return Verdict{Status: Unknown, Reason: ReasonAgentUnreachable,
			Message: fmt.Sprintf("the agent's control loop made no progress for %s", now.Sub(st.LastProgress).Round(time.Second))}
	case !st.Ready:
		return Verdict{Status: Unknown, Reason: ReasonAgentStarting, Message: "the agent is starting: " + st.ReadyDetail}
	}
	var (
		worst    = -1
		problems []string
		suspect  bool
	)
	for _, c := range st.Checks {
		r := checkReason(c)
		if r == "" {
			if !c.Healthy && (c.Kind == wire.KindPeer || c.Kind == wire.KindWorkload) {
				suspect = true // not confirmed yet
			}
			continue
		}
		problems = append(problems, describe(c))
		if i := reasonRank(r); worst < 0 || i < worst {
			worst = i
		}
	}
	if worst < 0 {
		if suspect && prev.Status != "" {
			return prev
		}
		if fitted := clampedPaths(st.Checks); len(fitted) > 0 {
			// It works, and the operator should know why: a clamp that
			// stays belongs in Flannel's config.
			return Verdict{Status: True, Reason: ReasonPathMTUClamped,
				Message: "edgeheal: every tunnel and workload path works; " + strings.Join(fitted, "; ")}
		}
		return Verdict{Status: True, Reason: ReasonHealthy, Message: "edgeheal: every tunnel and workload path works"}
	}
	reason := rankedReasons[worst]
	return Verdict{Status: False, Reason: reason, Message: "edgeheal: " + strings.Join(problems, "; "),
		Dark: reason == ReasonTunnelDark || reason == ReasonGaveUp}
}

// rankedReasons is the order in which a reason wins: worst first.
var rankedReasons = []string{ReasonGaveUp, ReasonTunnelDark, ReasonOffloadFight, ReasonPathMTUBlackhole, ReasonUplinkDown, ReasonBrokerUnreachable}

// clampedPaths describes the path-mtu checks whose path carries less than
// is sent, fitted by edgeheal's clamp.
func clampedPaths(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if c.Kind == wire.KindPathMTU && c.State == wire.CheckPathClamped {
			out = append(out, describe(c))
		}
	}
	return out
}

func reasonRank(r string) int {
	for i, x := range rankedReasons {
		if x == r {
			return i
		}
	}
	return len(rankedReasons)
}

// checkReason is the reason one check gives, or "" when it gives none
// (healthy, only suspect, or not about the overlay: the clock, a
// component).
func checkReason(c Check) string {
	switch c.Kind {
	case wire.KindPeer:
		switch c.State {
		case wire.CheckDegraded:
			return ReasonGaveUp
		case wire.CheckDown, wire.CheckHealing:
			return ReasonTunnelDark
		}
	case wire.KindWorkload:
		if c.State != wire.CheckDown || c.Workload == nil {
			return ""
		}
		switch c.Workload.Diagnosis {
		case wire.DiagOverlay:
			return ReasonTunnelDark
		case wire.DiagUplink:
			return ReasonUplinkDown
		case wire.DiagBroker:
			return ReasonBrokerUnreachable
		case wire.DiagPathMTU:
			return ReasonPathMTUBlackhole
		}
	case wire.KindUplink:
		if c.Uplink != nil && c.Uplink.Fighting {
			return ReasonOffloadFight
		}
	case wire.KindPathMTU:
		if c.State == wire.CheckPathLow {
			return ReasonPathMTUBlackhole
		}
	}
	return ""
}

func describe(c Check) string {
	s := c.Kind + " " + c.Target + " " + c.State
	if c.Detail != "" {
		s += ": " + c.Detail
	}
	return s
}

// Condition is the node condition as written to the API server.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastHeartbeatTime  time.Time `json:"lastHeartbeatTime"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// NextCondition is the condition to write at now for v, given the one
// written last (nil: none): the transition time moves only when the
// status does, as kubelet keeps it. Times are whole seconds, as the API
// server stores them.
func NextCondition(last *Condition, v Verdict, now time.Time) Condition {
	now = now.UTC().Truncate(time.Second)
	c := Condition{Type: ConditionType, Status: v.Status, Reason: v.Reason, Message: truncate(v.Message, 1024),
		LastHeartbeatTime: now, LastTransitionTime: now}
	if last != nil && last.Status == v.Status && !last.LastTransitionTime.IsZero() {
		c.LastTransitionTime = last.LastTransitionTime
	}
	return c
}

// Changed reports whether c says something last did not (everything but
// the heartbeat).
func (c Condition) Changed(last *Condition) bool {
	return last == nil || c.Status != last.Status || c.Reason != last.Reason || c.Message != last.Message
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
