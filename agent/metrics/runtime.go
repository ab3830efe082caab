package metrics

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The standard go_* and process_* metrics, with the names, types and
// meanings of client_golang's Go and process collectors (v1.25, which
// the daemon used before), read from the runtime and /proc/self at each
// scrape.

// gauge is a family with one unlabelled value.
type gauge struct {
	family
	v float64
}

func writeGauges(b *bytes.Buffer, gs []gauge) {
	for _, g := range gs {
		writeHeader(b, g.family)
		writeSample(b, g.name, nil, nil, "", "", g.v)
	}
}

func g(name, typ, help string, v float64) gauge {
	return gauge{family: family{name: name, help: help, typ: typ}, v: v}
}

// writeGoMetrics writes the go_* families.
func writeGoMetrics(b *bytes.Buffer) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, 5)}
	debug.ReadGCStats(&gc)
	writeHeader(b, family{name: "go_gc_duration_seconds", typ: typeSummary,
		help: "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles."})
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		writeSample(b, "go_gc_duration_seconds", nil, nil, "quantile", q, gc.PauseQuantiles[i].Seconds())
	}
	writeSample(b, "go_gc_duration_seconds_sum", nil, nil, "", "", gc.PauseTotal.Seconds())
	writeSample(b, "go_gc_duration_seconds_count", nil, nil, "", "", float64(gc.NumGC))
	rm := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(rm)
	threads, _ := runtime.ThreadCreateProfile(nil)
	writeGauges(b, []gauge{
		g("go_gc_gogc_percent", typeGauge, "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", sampleValue(rm[0])),
		g("go_gc_gomemlimit_bytes", typeGauge, "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", sampleValue(rm[1])),
		g("go_goroutines", typeGauge, "Number of goroutines that currently exist.", float64(runtime.NumGoroutine())),
	})
	writeHeader(b, family{name: "go_info", typ: typeGauge, help: "Information about the Go environment."})
	writeSample(b, "go_info", []string{"version"}, []string{runtime.Version()}, "", "", 1)
	writeGauges(b, memStatsGauges(&ms))
	writeGauges(b, []gauge{
		g("go_sched_gomaxprocs_threads", typeGauge, "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", float64(runtime.GOMAXPROCS(0))),
		g("go_threads", typeGauge, "Number of OS threads created.", float64(threads)),
	})
}

func sampleValue(s metrics.Sample) float64 {
	switch s.Value.Kind() {
	case metrics.KindUint64:
		return float64(s.Value.Uint64())
	case metrics.KindFloat64:
		return s.Value.Float64()
	}
	return math.NaN()
}

// memStatsGauges are the go_memstats_* families, in name order.
func memStatsGauges(ms *runtime.MemStats) []gauge {
	f := func(u uint64) float64 { return float64(u) }
	return []gauge{
		g("go_memstats_alloc_bytes", typeGauge, "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", f(ms.Alloc)),
		g("go_memstats_alloc_bytes_total", typeCounter, "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", f(ms.TotalAlloc)),
		g("go_memstats_buck_hash_sys_bytes", typeGauge, "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", f(ms.BuckHashSys)),
		g("go_memstats_frees_total", typeCounter, "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", f(ms.Frees)),
		g("go_memstats_gc_sys_bytes", typeGauge, "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", f(ms.GCSys)),
		g("go_memstats_heap_alloc_bytes", typeGauge, "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", f(ms.HeapAlloc)),
		g("go_memstats_heap_idle_bytes", typeGauge, "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", f(ms.HeapIdle)),
		g("go_memstats_heap_inuse_bytes", typeGauge, "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", f(ms.HeapInuse)),
		g("go_memstats_heap_objects", typeGauge, "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", f(ms.HeapObjects)),
		g("go_memstats_heap_released_bytes", typeGauge, "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", f(ms.HeapReleased)),
		g("go_memstats_heap_sys_bytes", typeGauge, "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", f(ms.HeapSys)),
		g("go_memstats_last_gc_time_seconds", typeGauge, "Number of seconds since 1970 of last garbage collection.", float64(ms.LastGC)/1e9),
		g("go_memstats_mallocs_total", typeCounter, "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", f(ms.Mallocs)),
		g("go_memstats_mcache_inuse_bytes", typeGauge, "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", f(ms.MCacheInuse)),
		g("go_memstats_mcache_sys_bytes", typeGauge, "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", f(ms.MCacheSys)),
		g("go_memstats_mspan_inuse_bytes", typeGauge, "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", f(ms.MSpanInuse)),
		g("go_memstats_mspan_sys_bytes", typeGauge, "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", f(ms.MSpanSys)),
		g("go_memstats_next_gc_bytes", typeGauge, "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", f(ms.NextGC)),
		g("go_memstats_other_sys_bytes", typeGauge, "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", f(ms.OtherSys)),
		g("go_memstats_stack_inuse_bytes", typeGauge, "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", f(ms.StackInuse)),
		g("go_memstats_stack_sys_bytes", typeGauge, "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", f(ms.StackSys)),
		g("go_memstats_sys_bytes", typeGauge, "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", f(ms.Sys)),
	}
}

// Linux's USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// architecture Linux runs Go on (procfs assumes the same).
const userHZ = 100

// writeProcessMetrics writes the process_* families from /proc/self, in
// name order; a file that cannot be read leaves its families out, as
// client_golang's collector did.
func writeProcessMetrics(b *bytes.Buffer) {
	var gs []gauge
	if st, ok := readStat(); ok {
		gs = append(gs,
			g("process_cpu_seconds_total", typeCounter, "Total user and system CPU time spent in seconds.", float64(st.utime+st.stime)/userHZ),
			g("process_resident_memory_bytes", typeGauge, "Resident memory size in bytes.", float64(st.rss*int64(os.Getpagesize()))),
			g("process_virtual_memory_bytes", typeGauge, "Virtual memory size in bytes.", float64(st.vsize)))
		if bt, ok := bootTime(); ok {
			gs = append(gs, g("process_start_time_seconds", typeGauge, "Start time of the process since unix epoch in seconds.", float64(bt)+float64(st.starttime)/userHZ))
		}
	}
	if max, ok := limit("Max address space"); ok {
		gs = append(gs, g("process_virtual_memory_max_bytes", typeGauge, "Maximum amount of virtual memory available in bytes.", max))
	}
	if max, ok := limit("Max open files"); ok {
		gs = append(gs, g("process_max_fds", typeGauge, "Maximum number of open file descriptors.", max))
	}
	if rx, tx, ok := netDev(); ok {
		gs = append(gs,
			g("process_network_receive_bytes_total", typeCounter, "Number of bytes received by the process over the network.", rx),
			g("process_network_transmit_bytes_total", typeCounter, "Number of bytes sent by the process over the network.", tx))
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		gs = append(gs, g("process_open_fds", typeGauge, "Number of open file descriptors.", float64(len(fds))))
	}
	slices.SortFunc(gs, func(a, b gauge) int { return strings.Compare(a.name, b.name) })
	writeGauges(b, gs)
}

type procStat struct {
	utime, stime, starttime int64
	vsize, rss              int64
}

// readStat reads /proc/self/stat. Its second field, the command, is in
// parentheses and may hold spaces: fields are counted after the last ')'.
func readStat() (procStat, bool) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3, state
	if len(f) < 22 {
		return procStat{}, false
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return procStat{utime: n(14), stime: n(15), starttime: n(22), vsize: n(23), rss: n(24)}, true
}

// bootTime is /proc/stat's btime, seconds since the epoch.
func bootTime() (int64, bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for l := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			bt, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return bt, err == nil
		}
	}
	return 0, false
}

// limit is the soft limit named in /proc/self/limits; "unlimited" is
// 2^64, as client_golang reported it.
func limit(name string) (float64, bool) {
	data, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0, false
	}
	for l := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(l, name); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			if f[0] == "unlimited" {
				return math.Exp2(64), true
			}
			v, err := strconv.ParseFloat(f[0], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// netDev sums the received and sent bytes of every interface in
// /proc/self/net/dev: the network namespace's, as client_golang reported.
func netDev() (rx, tx float64, ok bool) {
	data, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return 0, 0, false
	}
	for l := range strings.Lines(string(data)) {
		_, counters, found := strings.Cut(l, ":")
		if !found {
			continue // the two header lines
		}
		f := strings.Fields(counters)
		if len(f) < 9 {
			continue
		}
		r, _ := strconv.ParseFloat(f[0], 64)
		t, _ := strconv.ParseFloat(f[8], 64)
		rx, tx = rx+r, tx+t
	}
	return rx, tx, true
}
