package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is the part of the API server the reporter uses: its own Node and
// the Events about it. Every call is bounded by ctx.
type Client interface {
	// Node reads the node's condition (nil: none) and taints.
	Node(ctx context.Context, node string) (*Condition, []Taint, string, error)
	// PatchCondition writes c with a strategic merge patch of
	// nodes/<node>/status: the API server merges conditions by type, so the
	// kubelet's own conditions are kept (as node-problem-detector does it).
	PatchCondition(ctx context.Context, node string, c Condition) error
	// SetTaints replaces the node's taints, if its resourceVersion is still
	// rv (an error matching ErrConflict otherwise).
	SetTaints(ctx context.Context, node string, taints []Taint, rv string) error
	// CreateEvent creates w as a new Event about the node; PatchEvent raises
	// an existing one's count (an error matching ErrNotFound when it expired).
	CreateEvent(ctx context.Context, node string, w Write) error
	PatchEvent(ctx context.Context, w Write) error
}

// Errors the Client's errors match.
var (
	ErrConflict = errors.New("conflict")
	ErrNotFound = errors.New("not found")
)

// EventNamespace is where events about Nodes live (kubelet's recorder
// puts an object without a namespace's events in "default").
const EventNamespace = "default"

// Component is the events' source.
const Component = "edgeheal"

// RESTClient is the Client over client-go's rest.RESTClient, with a
// scheme of nothing: bodies are this package's own JSON, which keeps
// client-go's 17 MB scheme of every API group out of the binary.
type RESTClient struct {
	rc   *rest.RESTClient
	host string // the reporting host, events' source.host
}

var _ Client = (*RESTClient)(nil)

// NewRESTClient reads kubeconfig with clientcmd (as kubectl and the kubelet
// read it: certificate files, tokens, exec plugins) and makes the client.
// timeout bounds every request.
func NewRESTClient(kubeconfig, host string, timeout time.Duration) (*RESTClient, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.APIPath = "/api"
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	cfg.ContentType = "application/json"
	cfg.Timeout = timeout
	cfg.UserAgent = "edgeheal-kube"
	// The reporter paces itself (Correlator, backoff); client-go's own
	// default limiter (5 qps) would only delay a catch-up after an outage.
	cfg.QPS, cfg.Burst = 20, 40
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return &RESTClient{rc: rc, host: host}, nil
}

type nodeJSON struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Taints []Taint `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
}

// Node implements Client.
func (c *RESTClient) Node(ctx context.Context, node string) (*Condition, []Taint, string, error) {
	b, err := c.rc.Get().Resource("nodes").Name(node).Do(ctx).Raw()
	if err != nil {
		return nil, nil, "", mapErr(fmt.Errorf("reading node %s: %w", node, err), err)
	}
	var n nodeJSON
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, nil, "", fmt.Errorf("reading node %s: %w", node, err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == ConditionType {
			return &cond, n.Spec.Taints, n.Metadata.ResourceVersion, nil
		}
	}
	return nil, n.Spec.Taints, n.Metadata.ResourceVersion, nil
}

// PatchCondition implements Client.
func (c *RESTClient) PatchCondition(ctx context.Context, node string, cond Condition) error {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []Condition{cond}}})
	if err != nil {
		return err
	}
	err = c.rc.Patch(types.StrategicMergePatchType).Resource("nodes").Name(node).SubResource("status").
		Body(body).Do(ctx).Error()
	return mapErr(fmt.Errorf("patching the %s condition of node %s: %w", ConditionType, node, err), err)
}

// SetTaints implements Client. A merge patch replaces the list (taints
// have no merge key), and the resourceVersion in it makes the API server
// refuse it if the node changed since it was read.
func (c *RESTClient) SetTaints(ctx context.Context, node string, taints []Taint, rv string) error {
	if taints == nil {
		taints = []Taint{}
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": rv},
		"spec":     map[string]any{"taints": taints},
	})
	if err != nil {
		return err
	}
	err = c.rc.Patch(types.MergePatchType).Resource("nodes").Name(node).Body(body).Do(ctx).Error()
	return mapErr(fmt.Errorf("setting the taints of node %s: %w", node, err), err)
}

type eventJSON struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Metadata       map[string]any `json:"metadata"`
	InvolvedObject map[string]any `json:"involvedObject"`
	Type           string         `json:"type"`
	Reason         string         `json:"reason"`
	Message        string         `json:"message"`
	Source         map[string]any `json:"source"`
	Count          int            `json:"count"`
	FirstTimestamp time.Time      `json:"firstTimestamp"`
	LastTimestamp  time.Time      `json:"lastTimestamp"`
	ReportingComp  string         `json:"reportingComponent"`
	ReportingInst  string         `json:"reportingInstance"`
}

// CreateEvent implements Client. The involved object is the Node by name
// and UID "" (kubelet's recorder refers to its Node the same way).
func (c *RESTClient) CreateEvent(ctx context.Context, node string, w Write) error {
	ev := eventJSON{
		APIVersion: "v1", Kind: "Event",
		Metadata:       map[string]any{"name": w.Name, "namespace": EventNamespace},
		InvolvedObject: map[string]any{"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
		Type:           w.Type, Reason: w.Reason, Message: truncate(w.Message, 1024),
		Source: map[string]any{"component": Component, "host": c.host},
		Count:  w.Count, FirstTimestamp: w.First.UTC().Truncate(time.Second), LastTimestamp: w.Time.UTC().Truncate(time.Second),
		ReportingComp: Component, ReportingInst: c.host,
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	err = c.rc.Post().Namespace(EventNamespace).Resource("events").Body(body).Do(ctx).Error()
	return mapErr(fmt.Errorf("creating event %s on node %s: %w", w.Reason, node, err), err)
}

// PatchEvent implements Client.
func (c *RESTClient) PatchEvent(ctx context.Context, w Write) error {
	body, err := json.Marshal(map[string]any{"count": w.Count, "lastTimestamp": w.Time.UTC().Truncate(time.Second), "message": truncate(w.Message, 1024)})
	if err != nil {
		return err
	}
	err = c.rc.Patch(types.StrategicMergePatchType).Namespace(EventNamespace).Resource("events").Name(w.Name).
		Body(body).Do(ctx).Error()
	return mapErr(fmt.Errorf("updating event %s: %w", w.Name, err), err)
}

// mapErr makes wrapped (which wraps err, or is nil when err is) match
// ErrConflict or ErrNotFound for those API answers.
func mapErr(wrapped, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err):
		return errors.Join(wrapped, ErrConflict)
	case apierrors.IsNotFound(err):
		return errors.Join(wrapped, ErrNotFound)
	}
	return wrapped
}
