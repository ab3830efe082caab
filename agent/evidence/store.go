// Package evidence keeps the evidence bundles edgeheal takes when an
// incident opens: one JSON file each under <state_dir>/evidence/, written
// atomically, the newest few kept, secrets redacted whatever the caller
// passed. It only stores: what goes into a bundle is the agent's business.
package evidence

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/statedir"
)

// Bundle is the evidence captured when an incident opens. Sections are
// whatever the caller observed, by name; the conventional names are
// "wireguard_peers" (without keys), "uplinks" (NIC features), "udp" (the
// Udp counters of /proc/net/snmp, e.g. probes.UDPCounters), "routes",
// "links" (link statistics) and "probes" (the last probe results). Any
// value that encodes as JSON will do.
type Bundle struct {
	Incident string         `json:"incident"` // the incident's event id
	Time     time.Time      `json:"ts"`
	Target   string         `json:"target"`
	Reason   string         `json:"reason,omitempty"`
	Sections map[string]any `json:"sections"`
}

// DefaultKeep is how many bundles a Store keeps when
// opened with keep 0.
const DefaultKeep = 20

// Store writes bundles as JSON files into <state_dir>/evidence/
// and keeps only the newest few. Secrets never reach the disk: any field
// named like a private key, preshared key, password, secret or token is
// replaced by "[redacted]" whatever the caller passed.
type Store struct {
	dir  string
	keep int
	mu   sync.Mutex
}

// Open creates <stateDir>/evidence if needed.
func Open(stateDir string, keep int) (*Store, error) {
	if keep <= 0 {
		keep = DefaultKeep
	}
	dir := filepath.Join(stateDir, "evidence")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating evidence directory: %w", err)
	}
	return &Store{dir: dir, keep: keep}, nil
}

// Dir is the directory the bundles are written to.
func (s *Store) Dir() string { return s.dir }

// Save writes b (atomically: temporary file, sync, rename), removes the
// oldest bundles beyond the bound and returns a short summary to put into
// the incident event's Evidence: the file name, its size, the sections
// with their sizes, and the UDP checksum error count when the "udp"
// section has one.
func (s *Store) Save(b Bundle) (map[string]any, error) {
	if b.Time.IsZero() {
		b.Time = time.Now()
	}
	b.Time = b.Time.UTC()
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encoding evidence: %w", err)
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, fmt.Errorf("encoding evidence: %w", err)
	}
	redacted := redact(tree)
	out, err := json.MarshalIndent(tree, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding evidence: %w", err)
	}
	out = append(out, '\n')
	name := b.Time.Format("20060102T150405.000Z") + "-" + safeName(b.Incident) + ".json"

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := statedir.WriteFile(filepath.Join(s.dir, name), out, 0o600); err != nil {
		return nil, fmt.Errorf("writing evidence: %w", err)
	}
	if err := s.prune(); err != nil {
		return nil, err
	}

	sections := map[string]any{}
	for k, v := range sectionsOf(tree) {
		sections[k] = sizeOf(v)
	}
	sum := map[string]any{
		"evidence_file":  filepath.Join("evidence", name),
		"evidence_bytes": len(out),
		"sections":       sections,
	}
	if n, ok := udpCsumErrors(tree); ok {
		sum["udp_in_csum_errors"] = n
	}
	if redacted > 0 {
		sum["redacted_fields"] = redacted
	}
	return sum, nil
}

// List returns the stored bundle file names, oldest first.
func (s *Store) List() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("listing evidence: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // names start with a sortable UTC time
	return names, nil
}

func (s *Store) prune() error {
	names, err := s.List()
	if err != nil {
		return err
	}
	for len(names) > s.keep {
		if err := os.Remove(filepath.Join(s.dir, names[0])); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing old evidence: %w", err)
		}
		names = names[1:]
	}
	return nil
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	if b.Len() == 0 {
		return "incident"
	}
	return b.String()
}

// secretKey reports whether a JSON field name names a secret.
func secretKey(k string) bool {
	n := strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(k))
	for _, s := range []string{"privatekey", "presharedkey", "password", "secret", "token"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// redact replaces secret fields in a decoded JSON tree and counts them.
func redact(v any) int {
	n := 0
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if secretKey(k) {
				t[k] = "[redacted]"
				n++
				continue
			}
			n += redact(c)
		}
	case []any:
		for _, c := range t {
			n += redact(c)
		}
	}
	return n
}

// sizeOf is a section's size for the summary: the number of entries of a
// list or object, 1 for a scalar.
func sizeOf(v any) int {
	switch t := v.(type) {
	case []any:
		return len(t)
	case map[string]any:
		return len(t)
	case nil:
		return 0
	}
	return 1
}

// sectionsOf is the "sections" object of a decoded bundle (nil if absent).
func sectionsOf(tree any) map[string]any {
	top, _ := tree.(map[string]any)
	s, _ := top["sections"].(map[string]any)
	return s
}

func udpCsumErrors(tree any) (float64, bool) {
	udp, ok := sectionsOf(tree)["udp"].(map[string]any)
	if !ok {
		return 0, false
	}
	for _, k := range []string{"in_csum_errors", "InCsumErrors"} {
		if n, ok := udp[k].(float64); ok {
			return n, true
		}
	}
	return 0, false
}
