package systemdlab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/google/go-cmp/cmp"
)

const sleeper = `[Unit]
Description=edgeheal lab sleeper
DefaultDependencies=no

[Service]
Type=simple
ExecStart=/bin/sleep 3600
StandardOutput=null
StandardError=null
`

func TestLabBootsConfinedAndCleansUp(t *testing.T) {
	testsupport.RequireRoot(t, "systemd as PID 1: PID and mount namespaces, cgroups")
	tmpMarker := filepath.Join(os.TempDir(), "edgeheal-systemdlab-marker-"+time.Now().Format("150405.000000000"))
	if err := os.WriteFile(tmpMarker, []byte("must survive"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmpMarker)

	mountsBefore := superblocks(t)
	cgroupsBefore := v1ControllerCgroups(t)
	// A unit with PrivateTmp= has its /tmp and /var/tmp in the machine's,
	// as systemd-private-<boot>-<unit>-<random>: still running when PID 1
	// is killed, they are the lab's to remove.
	private := "edgeheal-lab-private-" + time.Now().Format("150405000000") + ".service"
	privateTmps := func() []string {
		var out []string
		for _, base := range []string{"/tmp", "/var/tmp"} {
			m, _ := filepath.Glob(filepath.Join(base, "systemd-private-*-"+private+"-*"))
			out = append(out, m...)
		}
		return out
	}
	var s *Systemd
	var name string
	t.Run("boot", func(t *testing.T) {
		s = Start(t, Options{
			Units: map[string]string{"sleeper.service": sleeper, private: strings.Replace(sleeper, "[Service]\n", "[Service]\nPrivateTmp=yes\n", 1)},
			Boot:  []string{"sleeper.service", private},
		})
		name = s.name
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := s.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st, err := c.ListUnitsByNamesContext(ctx, []string{"sleeper.service", "systemd-tmpfiles-setup.service", "mosquitto.service"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, u := range st {
			got[u.Name] = u.LoadState + "/" + u.ActiveState
		}
		t.Logf("units: %v", got)
		if got["sleeper.service"] != "loaded/active" {
			t.Errorf("sleeper.service is %s, want loaded/active", got["sleeper.service"])
		}
		if got["systemd-tmpfiles-setup.service"] != "masked/inactive" {
			t.Errorf("systemd-tmpfiles-setup.service is %s, want masked/inactive", got["systemd-tmpfiles-setup.service"])
		}
		testsupport.WaitFor(t, 10*time.Second, private+"'s private /tmp and /var/tmp on the machine", func() bool { return len(privateTmps()) == 2 })
		t.Logf("console:\n%s", s.Console())
	})
	if s == nil {
		return
	}
	// After the subtest's cleanup: PID 1 gone, cgroups gone, /tmp intact.
	if _, err := os.Stat("/proc/" + itoa(s.PID)); err == nil {
		t.Errorf("systemd (pid %d) still runs", s.PID)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/" + name); len(m) > 0 {
		t.Errorf("cgroups left behind: %v", m)
	}
	if left := privateTmps(); len(left) > 0 {
		t.Errorf("a running unit's PrivateTmp= directories left in the machine's /tmp and /var/tmp: %v", left)
	}
	if b, err := os.ReadFile(tmpMarker); err != nil || string(b) != "must survive" {
		t.Errorf("a file in the machine's /tmp did not survive: %v", err)
	}
	if diff := cmp.Diff(mountsBefore, superblocks(t)); diff != "" {
		t.Errorf("the host's mounts changed (-before +after):\n%s", diff)
	}
	// The kernel tears an unmounted hierarchy down asynchronously.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && v1ControllerCgroups(t) != cgroupsBefore; {
		time.Sleep(50 * time.Millisecond)
	}
	if diff := cmp.Diff(cgroupsBefore, v1ControllerCgroups(t)); diff != "" {
		t.Errorf("cgroups left in hierarchies the host does not mount (-before +after):\n%s", diff)
	}
	if entries, _ := os.ReadDir("/sys/fs/cgroup"); true {
		for _, e := range entries {
			if strings.Contains(e.Name(), ",") || e.Name() == "hugetlb" || e.Name() == "perf_event" {
				t.Errorf("/sys/fs/cgroup/%s appeared on the host", e.Name())
			}
		}
	}
}

// superblocks maps every mount point of the host to its mount and
// superblock options (a remount by the lab would show here).
func superblocks(t *testing.T) map[string]string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || strings.HasPrefix(f[4], "/run/netns") || strings.HasPrefix(f[4], "/tmp") {
			continue // others' namespaces and test mounts come and go
		}
		m[f[4]] = f[5] + " " + f[len(f)-1]
	}
	return m
}

// v1ControllerCgroups is /proc/cgroups: a cgroup left in a hierarchy only
// the lab mounted would keep its count up after the lab is gone.
func v1ControllerCgroups(t *testing.T) string {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[1] == "0" { // not mounted on the host
			out = append(out, f[0]+" "+f[2])
		}
	}
	return strings.Join(out, "\n")
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return fmtInt(i/10) + string(rune('0'+i%10))
}
