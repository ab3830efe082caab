package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Sandbox is a ready pod sandbox as CRI lists it.
type Sandbox struct {
	ID        string
	Name      string // the pod's name
	Namespace string // the pod's Kubernetes namespace
	Labels    map[string]string
	CreatedAt time.Time
}

// SandboxInfo is what a sandbox's verbose status says about its network.
type SandboxInfo struct {
	NetnsPath   string   // runtimeSpec.linux.namespaces[type=network].path
	PID         int      // the sandbox (pause) process
	DNSServers  []string // config.dns_config.servers
	NetnsClosed bool     // containerd: netNamespaceClosed
}

// CRI is the part of the CRI runtime service that pod resolution uses.
// CRIClient is the real one; tests use a fake.
type CRI interface {
	// ReadySandboxes lists the sandboxes in state READY that carry all of
	// labels (none: every ready sandbox).
	ReadySandboxes(ctx context.Context, labels map[string]string) ([]Sandbox, error)
	// SandboxInfo reads the verbose status of one sandbox.
	SandboxInfo(ctx context.Context, id string) (SandboxInfo, error)
}

// PodSelector picks a pod: its Kubernetes namespace plus its name or
// labels (or both).
type PodSelector struct {
	Namespace string
	Name      string
	Labels    map[string]string
}

func (s PodSelector) String() string {
	var b strings.Builder
	b.WriteString(s.Namespace)
	b.WriteString("/")
	if s.Name != "" {
		b.WriteString(s.Name)
	}
	if len(s.Labels) > 0 {
		keys := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(k + "=" + s.Labels[k])
		}
		b.WriteString("}")
	}
	return b.String()
}

// Where says how to find a workload's network namespace. Exactly one way
// is used, in this order: Pod through CRI (when Pod.Name or Pod.Labels is
// set), an explicit Netns path, or a PID.
type Where struct {
	Pod       PodSelector
	CRISocket string
	Netns     string
	PID       int
}

// Target is a resolved network namespace and where it came from.
type Target struct {
	Netns     Netns  `json:"-"`
	Path      string `json:"netns"`
	Source    string `json:"source"` // "cri", "netns", "pid"
	Pod       string `json:"pod,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
	PID       int    `json:"pid,omitempty"`
	// ID identifies the namespace: its path, the device:inode of its file
	// and, through CRI, the sandbox. A recreated pod gets a new one, so a
	// change of ID means re-baseline. The inode alone is not enough: the
	// kernel reuses namespace inode numbers as soon as one is freed
	// (measured: a recreated sandbox got its predecessor's inode).
	ID string `json:"netns_id"`
}

// Sources of a Target.
const (
	SourceCRI   = "cri"
	SourceNetns = "netns"
	SourcePID   = "pid"
)

// ResolvePod finds the pod's network namespace through CRI. The pod is
// the newest READY sandbox in sel.Namespace with sel.Name (if set) and all
// of sel.Labels (during a rollout two may be ready: the newer one is the
// one that stays). The namespace path comes from the verbose status; if the
// runtime does not give one, from /proc/<pid>/ns/net of the sandbox.
//
// No matching sandbox is ErrNoPod (wrapped): an observation, not a failure.
// A CRI that cannot be reached is an ordinary error.
func ResolvePod(ctx context.Context, cri CRI, sel PodSelector) (Target, error) {
	if sel.Name == "" && len(sel.Labels) == 0 {
		return Target{}, errors.New("pod selector needs a name or labels")
	}
	boxes, err := cri.ReadySandboxes(ctx, sel.Labels)
	if err != nil {
		return Target{}, fmt.Errorf("listing ready pod sandboxes: %w", err)
	}
	var match []Sandbox
	for _, b := range boxes {
		if sel.Namespace != "" && b.Namespace != sel.Namespace {
			continue
		}
		if sel.Name != "" && b.Name != sel.Name {
			continue
		}
		if !hasLabels(b.Labels, sel.Labels) {
			continue
		}
		match = append(match, b)
	}
	sort.SliceStable(match, func(i, j int) bool { return match[i].CreatedAt.After(match[j].CreatedAt) })
	for _, b := range match {
		info, err := cri.SandboxInfo(ctx, b.ID)
		if err != nil {
			return Target{}, fmt.Errorf("reading status of sandbox %s: %w", short(b.ID), err)
		}
		if info.NetnsClosed {
			continue // being torn down
		}
		t := Target{Source: SourceCRI, Pod: b.Namespace + "/" + b.Name, SandboxID: b.ID, PID: info.PID}
		switch {
		case info.NetnsPath != "":
			t.Path = info.NetnsPath
		case info.PID > 0:
			t.Path = fmt.Sprintf("/proc/%d/ns/net", info.PID)
		default:
			return Target{}, fmt.Errorf("sandbox %s of pod %s: no network namespace path and no pid in its status", short(b.ID), t.Pod)
		}
		t.Netns = Netns{Path: t.Path, DNSServers: info.DNSServers}
		ino, err := namespaceID(t.Path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // gone between list and stat
			}
			return Target{}, err
		}
		t.ID = b.ID + "@" + t.Path + "@" + ino
		return t, nil
	}
	return Target{}, fmt.Errorf("pod %s: %w", sel, ErrNoPod)
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ResolvePath uses an explicit namespace file.
func ResolvePath(path string) (Target, error) {
	ino, err := namespaceID(path)
	if err != nil {
		return Target{}, err
	}
	return Target{Netns: Netns{Path: path}, Path: path, Source: SourceNetns, ID: path + "@" + ino}, nil
}

// ResolvePID uses the network namespace of a process, and the name servers
// of its /etc/resolv.conf when it can be read.
func ResolvePID(pid int) (Target, error) {
	path := fmt.Sprintf("/proc/%d/ns/net", pid)
	ino, err := namespaceID(path)
	if err != nil {
		return Target{}, err
	}
	servers, _ := podNameservers(fmt.Sprintf("/proc/%d/root", pid))
	return Target{Netns: Netns{Path: path, DNSServers: servers}, Path: path, Source: SourcePID, PID: pid, ID: path + "@" + ino}, nil
}

// namespaceID returns "dev:inode" of a namespace file: the same for two
// paths of one live namespace.
func namespaceID(path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", &NamespaceError{Op: "opening", Path: path, Err: &os.PathError{Op: "stat", Path: path, Err: err}}
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}

// Locator resolves a Where, keeping one CRI connection per socket. Its
// zero value is ready to use; Close releases the connections.
type Locator struct {
	// Dial opens a CRI client for a socket path; nil means DialCRI.
	Dial func(socket string) (CRI, error)

	mu   sync.Mutex
	cris map[string]CRI
}

// Locate resolves w. See ResolvePod for CRI; an explicit netns or pid that
// does not exist is an error matching os.ErrNotExist.
func (l *Locator) Locate(ctx context.Context, w Where) (Target, error) {
	switch {
	case w.Pod.Name != "" || len(w.Pod.Labels) > 0:
		if w.CRISocket == "" {
			return Target{}, errors.New("pod selector without a cri socket")
		}
		cri, err := l.cri(w.CRISocket)
		if err != nil {
			return Target{}, err
		}
		return ResolvePod(ctx, cri, w.Pod)
	case w.Netns != "":
		return ResolvePath(w.Netns)
	case w.PID > 0:
		return ResolvePID(w.PID)
	}
	return Target{}, errors.New("no pod selector, netns path or pid")
}

func (l *Locator) cri(socket string) (CRI, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.cris[socket]; ok {
		return c, nil
	}
	dial := l.Dial
	if dial == nil {
		dial = func(s string) (CRI, error) { return DialCRI(s) }
	}
	c, err := dial(socket)
	if err != nil {
		return nil, fmt.Errorf("connecting to cri at %s: %w", socket, err)
	}
	if l.cris == nil {
		l.cris = map[string]CRI{}
	}
	l.cris[socket] = c
	return c, nil
}

// Close closes every CRI connection the Locator opened.
func (l *Locator) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for s, c := range l.cris {
		if cl, ok := c.(interface{ Close() error }); ok {
			errs = append(errs, cl.Close())
		}
		delete(l.cris, s)
	}
	return errors.Join(errs...)
}

// ParseSandboxInfo reads the verbose status map of a sandbox as
// containerd's CRI plugin writes it (1.6 and 1.7, 2026-05): a JSON document
// under "info" with pid, netNamespaceClosed, config.dns_config and
// runtimeSpec.linux.namespaces. Other runtimes may leave fields empty.
func ParseSandboxInfo(info map[string]string) (SandboxInfo, error) {
	raw, ok := info["info"]
	if !ok {
		return SandboxInfo{}, errors.New("verbose sandbox status has no info")
	}
	var doc struct {
		PID         int  `json:"pid"`
		NetnsClosed bool `json:"netNamespaceClosed"`
		Config      struct {
			DNSConfig struct {
				Servers []string `json:"servers"`
			} `json:"dns_config"`
		} `json:"config"`
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		return SandboxInfo{}, fmt.Errorf("parsing verbose sandbox info: %w", err)
	}
	si := SandboxInfo{PID: doc.PID, NetnsClosed: doc.NetnsClosed, DNSServers: doc.Config.DNSConfig.Servers}
	for _, ns := range doc.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			si.NetnsPath = ns.Path
		}
	}
	return si, nil
}

// String describes w for messages.
func (w Where) String() string {
	switch {
	case w.Pod.Name != "" || len(w.Pod.Labels) > 0:
		return "pod " + w.Pod.String()
	case w.Netns != "":
		return "netns " + w.Netns
	case w.PID > 0:
		return "pid " + strconv.Itoa(w.PID)
	}
	return "nowhere"
}
