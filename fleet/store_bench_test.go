package fleet

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkStoreFullHistory is the view's memory at its worst: 10,000
// nodes, each with its events full (more events than it keeps, every one
// an action with a summary and evidence as the agent sends them) and a
// full retained history (48 hours, 90 days, four targets, 20 incidents).
// It reports the heap per node; docs/fleet.md, "Memory", uses it.
func BenchmarkStoreFullHistory(b *testing.B) {
	const nodes = 10000
	st, _ := json.Marshal(map[string]any{"v": 1, "state": "online", "session": 4, "ts": t0, "site": "site-01", "version": "1.4.0",
		"checks": map[string]any{"total": 4, "healthy": 4, "items": []any{
			map[string]any{"kind": "component", "target": "mqtt", "state": "ok", "healthy": true, "detail": "connected (session 4)"},
			map[string]any{"kind": "uplink", "target": "wwan0", "state": "ok", "healthy": true},
			map[string]any{"kind": "peer", "target": "flannel-wg/AbCdEfGh", "state": "ok", "healthy": true},
			map[string]any{"kind": "workload", "target": "collector", "state": "ok", "healthy": true}}}})
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := NewStore("edgeheal/v1")
		for i := range nodes {
			name := fmt.Sprintf("node-%05d", i)
			s.Apply(Message{Topic: "edgeheal/v1/" + name + "/status", Payload: st, Received: t0})
			hist, _ := json.Marshal(fullHistory(name, "site-01", t0, i%600))
			s.Apply(Message{Topic: "edgeheal/v1/" + name + "/history", Payload: hist, Received: t0})
			for j := range keepEvents + keepActions {
				ev, _ := json.Marshal(map[string]any{"v": 1, "node": name, "id": fmt.Sprintf("%s-%03d", name, j), "ts": t0.Add(time.Duration(j) * time.Second),
					"kind": "action", "target": "flannel-wg/AbCdEfGh", "action": "handshake", "result": "changed", "duration_seconds": 0.004,
					"summary": "handshake on flannel-wg/AbCdEfGh changed", "evidence": map[string]any{"reason": "probe missed 3 times", "budget_left": 2}})
				s.Apply(Message{Topic: "edgeheal/v1/" + name + "/event", Payload: ev, Received: t0})
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/nodes, "heap-B/node")
		runtime.KeepAlive(s)
	}
}

// BenchmarkCompactHistory is the store's own work on a full history once
// decoded (the view's start does it once a node): what it allocates is
// garbage the collector walks at a 100,000-node start.
func BenchmarkCompactHistory(b *testing.B) {
	s := NewStore("edgeheal/v1")
	h := fullHistory("node-00001", "site-01", t0, 60)
	b.ReportAllocs()
	for b.Loop() {
		runtime.KeepAlive(s.compactHistory(h))
	}
}
