package footprint

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Memory is what /proc/<pid>/smaps_rollup and status say about a process,
// in KiB. Rss counts the pages of the mapped binary that were touched as
// well as the process's own memory; Anonymous is the part only it has
// (heap, stacks, runtime metadata); Pss shares file pages among the
// processes that map them.
type Memory struct {
	RssKiB       int64 `json:"rss_kib"`
	PssKiB       int64 `json:"pss_kib"`
	AnonymousKiB int64 `json:"anonymous_kib"`
	FileKiB      int64 `json:"file_kib"` // Rss - Anonymous: mapped files, the binary's text and data
	PeakKiB      int64 `json:"peak_rss_kib"`
}

// readMemory reads smaps_rollup (Rss, Pss, Anonymous) and status (VmHWM).
func readMemory(pid int) (Memory, error) {
	var m Memory
	roll, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return m, err
	}
	kv := kib(string(roll))
	m.RssKiB, m.PssKiB, m.AnonymousKiB = kv["Rss"], kv["Pss"], kv["Anonymous"]
	m.FileKiB = m.RssKiB - m.AnonymousKiB
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	m.PeakKiB = kib(string(st))["VmHWM"]
	return m, nil
}

// median is the median of each field over samples (the peak: the
// largest), so that one sample taken just before a collection does not
// make the figure.
func median(samples []Memory) Memory {
	field := func(get func(Memory) int64) int64 {
		v := make([]int64, len(samples))
		for i, s := range samples {
			v[i] = get(s)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	m := Memory{
		RssKiB:       field(func(m Memory) int64 { return m.RssKiB }),
		PssKiB:       field(func(m Memory) int64 { return m.PssKiB }),
		AnonymousKiB: field(func(m Memory) int64 { return m.AnonymousKiB }),
		FileKiB:      field(func(m Memory) int64 { return m.FileKiB }),
	}
	for _, s := range samples {
		m.PeakKiB = max(m.PeakKiB, s.PeakKiB)
	}
	return m
}

// kib parses "Name:   123 kB" lines.
func kib(s string) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// Row is one process of the run.
type Row struct {
	Name        string  `json:"name"`
	Config      string  `json:"config"`
	Memory      Memory  `json:"memory"`
	CPUPerMin   float64 `json:"cpu_seconds_per_minute"` // over the idle window
	BinaryBytes int64   `json:"binary_bytes"`
	Goroutines  int     `json:"goroutines"` // go_goroutines of its last scrape
	Threads     int     `json:"threads"`
	ScrapeBytes int     `json:"scrape_bytes"`   // the size of one /metrics
	Series      int     `json:"metrics_series"` // samples in one /metrics
	HeapInuse   float64 `json:"heap_inuse_bytes"`
	HeapFree    float64 `json:"heap_free_bytes"` // idle heap not yet returned to the OS
	StackInuse  float64 `json:"stack_inuse_bytes"`
	GoSys       float64 `json:"go_sys_bytes"` // all the Go runtime obtained from the OS
	Note        string  `json:"note,omitempty"`
}

// Result is one run, as committed in bench/results.
type Result struct {
	Date        string  `json:"date"`
	Commit      string  `json:"commit"`
	Machine     string  `json:"machine"`
	Edgeheal    string  `json:"edgeheal_version"` // what `edgeheal version` printed
	NodeExpVer  string  `json:"node_exporter_version"`
	AgentEnv    string  `json:"agent_env,omitempty"` // -footprint.env
	IdleSeconds float64 `json:"idle_seconds"`
	Scrapes     int     `json:"scrapes"`
	Rows        []Row   `json:"rows"` // node_exporter first
}

func mib(k int64) string { return fmt.Sprintf("%.2f MiB", float64(k)/1024) }

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Markdown is the run as tables: absolute figures, then each edgeheal
// row's ratios to node_exporter (the first row) from the same run.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Footprint: edgeheal and node_exporter side by side\n\n%s, commit `%s`, %s. edgeheal: `%s`; node_exporter %s.\n"+
		"Each process: %d scrapes of `/metrics`, then %.0f s idle. Memory is the median of one sample a second over the idle window "+
		"(peak RSS: the kernel's high-water mark); CPU is the idle window's.\n\n",
		r.Date, r.Commit, r.Machine, r.Edgeheal, r.NodeExpVer, r.Scrapes, r.IdleSeconds)
	if r.AgentEnv != "" {
		fmt.Fprintf(&b, "Both agents ran with `%s` in their environment.\n\n", r.AgentEnv)
	}
	b.WriteString("| process | RSS | Pss | anonymous | file-backed | peak RSS | CPU per minute | binary | goroutines | threads |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.3f s | %.2f MB | %d | %d |\n", w.Name, mib(w.Memory.RssKiB), mib(w.Memory.PssKiB),
			mib(w.Memory.AnonymousKiB), mib(w.Memory.FileKiB), mib(w.Memory.PeakKiB), w.CPUPerMin, float64(w.BinaryBytes)/1e6, w.Goroutines, w.Threads)
	}
	if len(r.Rows) > 1 {
		ne := r.Rows[0]
		fmt.Fprintf(&b, "\nRatios to %s in the same run (under 1× is lighter):\n\n| process | RSS | anonymous | peak RSS | CPU per minute | binary | goroutines |\n|---|---|---|---|---|---|---|\n", ne.Name)
		for _, w := range r.Rows[1:] {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", w.Name,
				ratio(float64(w.Memory.RssKiB), float64(ne.Memory.RssKiB)), ratio(float64(w.Memory.AnonymousKiB), float64(ne.Memory.AnonymousKiB)),
				ratio(float64(w.Memory.PeakKiB), float64(ne.Memory.PeakKiB)), ratio(w.CPUPerMin, ne.CPUPerMin),
				ratio(float64(w.BinaryBytes), float64(ne.BinaryBytes)), ratio(float64(w.Goroutines), float64(ne.Goroutines)))
		}
	}
	b.WriteString("\nThe Go runtime's own view at the last scrape (`go_memstats_*`), and the size of one scrape:\n\n| process | heap in use | heap free, not returned | stacks | Go runtime total (sys, virtual) | /metrics | series |\n|---|---|---|---|---|---|---|\n")
	for _, w := range r.Rows {
		fmt.Fprintf(&b, "| %s | %.2f MiB | %.2f MiB | %.2f MiB | %.2f MiB | %d B | %d |\n", w.Name, w.HeapInuse/(1<<20), w.HeapFree/(1<<20),
			w.StackInuse/(1<<20), w.GoSys/(1<<20), w.ScrapeBytes, w.Series)
	}
	b.WriteString("\n| process | config |\n|---|---|\n")
	for _, w := range r.Rows {
		note := w.Config
		if w.Note != "" {
			note += " — " + w.Note
		}
		fmt.Fprintf(&b, "| %s | %s |\n", w.Name, note)
	}
	return b.String()
}

// write puts footprint-<date>.json and .md into dir.
func (r *Result) write(dir string) error {
	stamp := strings.NewReplacer(":", "", "-", "").Replace(r.Date)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "footprint-"+stamp+".json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "footprint-"+stamp+".md"), []byte(r.Markdown()), 0o644)
}

func TestKiBParsesSmapsRollupAndStatus(t *testing.T) {
	// /proc/<pid>/smaps_rollup of a running edgeheal, kernel 6.18 (abridged).
	roll := `00400000-7ffe5b9fe000 ---p 00000000 00:00 0                          [rollup]
Rss:               12544 kB
Pss:               12310 kB
Pss_Dirty:          6104 kB
Pss_Anon:           6104 kB
Pss_File:           6206 kB
Anonymous:          6104 kB
Swap:                  0 kB
`
	got := kib(roll)
	want := map[string]int64{"Rss": 12544, "Pss": 12310, "Pss_Dirty": 6104, "Pss_Anon": 6104, "Pss_File": 6206, "Anonymous": 6104, "Swap": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReadMemoryOfThisProcess(t *testing.T) {
	m, err := readMemory(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if m.RssKiB <= 0 || m.AnonymousKiB <= 0 || m.FileKiB <= 0 || m.PeakKiB < m.RssKiB || m.FileKiB+m.AnonymousKiB != m.RssKiB {
		t.Errorf("implausible memory of this process: %+v", m)
	}
}

func TestMedianIsPerFieldAndThePeakIsTheHighest(t *testing.T) {
	got := median([]Memory{
		{RssKiB: 30, AnonymousKiB: 3, FileKiB: 27, PeakKiB: 31},
		{RssKiB: 10, AnonymousKiB: 9, FileKiB: 1, PeakKiB: 40},
		{RssKiB: 20, AnonymousKiB: 1, FileKiB: 19, PeakKiB: 35},
	})
	want := Memory{RssKiB: 20, AnonymousKiB: 3, FileKiB: 19, PeakKiB: 40}
	if got != want {
		t.Errorf("median %+v, want %+v", got, want)
	}
}

func TestTheTablesCarryTheRatios(t *testing.T) {
	r := Result{Date: "2026-12-01T00:00:00Z", Commit: "abc", Machine: "m", NodeExpVer: "1.5.0", IdleSeconds: 60, Scrapes: 3, Rows: []Row{
		{Name: "node_exporter", Memory: Memory{RssKiB: 20480, AnonymousKiB: 10240, PeakKiB: 20480}, CPUPerMin: 0.1, BinaryBytes: 14_000_000, Goroutines: 10},
		{Name: "edgeheal (leaf)", Memory: Memory{RssKiB: 10240, AnonymousKiB: 5120, PeakKiB: 15360}, CPUPerMin: 0.05, BinaryBytes: 11_000_000, Goroutines: 25},
	}}
	md := r.Markdown()
	for _, want := range []string{
		"| edgeheal (leaf) | 10.00 MiB |",
		"| edgeheal (leaf) | 0.50× | 0.50× | 0.75× | 0.50× | 0.79× | 2.50× |",
		"3 scrapes of `/metrics`, then 60 s idle",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
}
