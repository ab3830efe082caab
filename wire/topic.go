package wire

import (
	"fmt"
	"strings"
)

// DefaultTopicPrefix is where a node publishes when its config names no
// prefix: <prefix>/<node>/<kind>.
const DefaultTopicPrefix = "edgeheal/v1"

// Topic kinds: the last level of a node's topics.
const (
	TopicStatus = "status" // retained Status, and the Last Will
	TopicEvent  = "event"  // EventMessage, one per event, not retained
	// TopicHistory (history.go): a retained History.
)

// Topic is <prefix>/<node>/<kind>.
func Topic(prefix, node, kind string) string { return prefix + "/" + node + "/" + kind }

// ParseTopic splits <prefix>/<node>/<kind> into the node and the kind. The
// node comes from the topic, not the payload: the broker's ACL is what
// lets a node write only its own topics.
func ParseTopic(prefix, topic string) (node, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, prefix+"/")
	if !ok {
		return "", "", fmt.Errorf("topic %q is not under %s/", topic, prefix)
	}
	node, kind, ok = strings.Cut(rest, "/")
	if !ok || node == "" || strings.Contains(kind, "/") || (kind != TopicStatus && kind != TopicEvent && kind != TopicHistory) {
		return "", "", fmt.Errorf("topic %q: want %s/<node>/%s, %s or %s", topic, prefix, TopicStatus, TopicEvent, TopicHistory)
	}
	return node, kind, nil
}
