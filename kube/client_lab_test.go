package kube

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport/kubelab"
)

// TestLabRESTClientAgainstARealAPIServer: the client's calls as a real
// kube-apiserver answers them: the condition merged among the kubelet's,
// taints replaced only at the resourceVersion read (ErrConflict
// otherwise), events created and their count raised, ErrNotFound for an
// event the API server does not have.
func TestLabRESTClientAgainstARealAPIServer(t *testing.T) {
	k := kubelab.Start(t)
	node := kubelab.RandomName("edge-")
	kc := k.Kubeconfig("admin", kubelab.AdminToken)
	c, err := NewRESTClient(kc, node, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, _, err := c.Node(ctx, node); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a Node that does not exist: %v, want ErrNotFound", err)
	}
	// The Node, and the kubelet's Ready condition, through the same client.
	if err := c.rc.Post().Resource("nodes").Body([]byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"` + node + `"}}`)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	ready := Condition{Type: "Ready", Status: True, Reason: "KubeletReady", LastHeartbeatTime: t0, LastTransitionTime: t0}
	if err := c.PatchCondition(ctx, node, ready); err != nil {
		t.Fatal(err)
	}
	ours := NextCondition(nil, Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: peer wg0/x down"}, time.Now())
	if err := c.PatchCondition(ctx, node, ours); err != nil {
		t.Fatal(err)
	}
	got, taints, rv, err := c.Node(ctx, node)
	if err != nil || got == nil || got.Status != False || got.Reason != ReasonTunnelDark || !got.LastTransitionTime.Equal(ours.LastTransitionTime) {
		t.Fatalf("condition read back = %+v, %v; want %+v", got, err, ours)
	}
	if code, body, _ := k.Get("/api/v1/nodes/" + node); code != http.StatusOK || !strings.Contains(body, `"KubeletReady"`) {
		t.Errorf("the kubelet's Ready condition is gone: %d %s", code, body)
	}

	next, _ := ApplyTaint(taints, TaintAdd, time.Now())
	if err := c.SetTaints(ctx, node, next, rv); err != nil {
		t.Fatal(err)
	}
	if err := c.SetTaints(ctx, node, nil, rv); !errors.Is(err, ErrConflict) {
		t.Errorf("taints at a stale resourceVersion: %v, want ErrConflict", err)
	}
	_, taints, rv, _ = c.Node(ctx, node)
	if !hasTaint(taints) {
		t.Fatalf("taints = %+v, want edgeheal's", taints)
	}
	next, _ = ApplyTaint(taints, TaintRemove, time.Now())
	if err := c.SetTaints(ctx, node, next, rv); err != nil {
		t.Fatal(err)
	}
	if _, taints, _, _ = c.Node(ctx, node); hasTaint(taints) {
		t.Errorf("taints = %+v after the removal", taints)
	}

	var corr Correlator
	now := time.Now()
	w, _ := corr.Correlate(Note{Type: Warning, Reason: ReasonTunnelDark, Message: "m", Time: now}, func() string { return eventName(node, now) })
	if err := c.CreateEvent(ctx, node, w); err != nil {
		t.Fatal(err)
	}
	w2, _ := corr.Correlate(Note{Type: Warning, Reason: ReasonTunnelDark, Message: "m", Time: now.Add(2 * time.Second)}, nil)
	if err := c.PatchEvent(ctx, w2); err != nil {
		t.Fatal(err)
	}
	code, body, _ := k.Get("/api/v1/namespaces/default/events/" + w.Name)
	if code != http.StatusOK || !strings.Contains(body, `"count":2`) || !strings.Contains(body, `"kind":"Node"`) || !strings.Contains(body, `"component":"edgeheal"`) {
		t.Errorf("the event after one repeat: %d %s", code, body)
	}
	if err := c.PatchEvent(ctx, Write{Note: Note{Time: now}, Name: "gone." + node, Count: 2}); !errors.Is(err, ErrNotFound) {
		t.Errorf("patching an event the API server does not have: %v, want ErrNotFound", err)
	}
}
