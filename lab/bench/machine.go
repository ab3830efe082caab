package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
)

// Machine describes where a benchmark ran.
type Machine struct {
	Hostname            string `json:"hostname"`
	OS                  string `json:"os"`
	Kernel              string `json:"kernel"`
	CPUModel            string `json:"cpu_model"`
	CPUs                int    `json:"cpus"`
	Memory              string `json:"memory"`
	LoadAvg             string `json:"loadavg"`
	GoVersion           string `json:"go_version"`
	Commit              string `json:"commit"`
	EdgehealVersion     string `json:"edgeheal_version"`
	EdgehealBinaryBytes int64  `json:"edgeheal_binary_bytes"`
}

// DescribeMachine reads /proc and /etc/os-release; missing facts stay empty.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m.Memory = memText(strings.TrimSpace(v))
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				m.Commit = s.Value[:12]
			}
		}
	}
	if m.Commit == "" {
		if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
			m.Commit = strings.TrimSpace(string(out))
			// The daemon is built from the work tree: say when it differs.
			if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", "agent", "probes", "netfix", "configs", "cmd/edgeheal").Output(); err == nil && len(st) > 0 {
				m.Commit += "+dirty"
			}
		}
	}
	return m
}

// memText turns "8123456 kB" into "7.7 GiB".
func memText(v string) string {
	var kb float64
	if _, err := fmt.Sscanf(v, "%f kB", &kb); err != nil {
		return v
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}
