// Package systemdlab boots a real systemd as PID 1 of a private PID, mount,
// UTS (and by default network) namespace, for tests that need the real
// service manager (restart-unit, Type=notify, watchdog), and removes it
// again.
//
// A plain boot is unsafe on a shared test machine: it would run
// systemd-tmpfiles-setup (Debian's "D /tmp" rule empties the machine's
// /tmp), udev coldplug, sysctl writes and the machine's own services. So
// the boot is confined, following the recipe in docs/lab.md, "systemd as PID 1":
//
//   - an own cgroup subtree (one directory per mounted hierarchy), so that
//     systemd manages only that subtree and everything it starts can be
//     found and removed;
//   - unshare --pid --fork --mount --mount-proc --uts [--net] with private
//     mount propagation, so nothing mounted inside reaches the host;
//   - inside: a tmpfs on /run; a private tmpfs on /sys/fs/cgroup with the
//     host's hierarchies bound into it (systemd remounts that tmpfs
//     read-only, which on the host's own tmpfs is a superblock change the
//     host sees: measured 2026-11, systemd 252); /sys and /proc/sys
//     bind-remounted read-only (per mount, the host's superblocks are
//     untouched); a pty bound over /dev/console (PID 1 logs there:
//     Console); the test's units copied to
//     /run/systemd/system and everything that could touch the machine
//     masked (tmpfiles, udev, sysctl, modules, remount-fs, random-seed,
//     timesyncd, networkd, journald, gettys, the standard boot targets and
//     every unit the machine enables under /etc/systemd/system/*.wants);
//   - systemd started with --unit=edgeheal-lab.target, a target with
//     DefaultDependencies=no that wants only the test's boot units.
//
// It is ended by SIGKILL to its PID 1 from outside (never a clean
// shutdown, which would try to unmount and stop things), after which the
// kernel kills every process of the PID namespace; then the cgroup
// directories are removed. Units given to Start must use
// DefaultDependencies=no (otherwise they pull in sysinit.target, which is
// masked, and fail).
//
// Tested with systemd 252 (Debian 12) on a cgroup v1/v2 hybrid host,
// 2026-11.
package systemdlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// Target is the unit systemd boots into.
const Target = "edgeheal-lab.target"

// Options configure a boot.
type Options struct {
	// Units are unit files (name → content) copied to /run/systemd/system.
	Units map[string]string
	// Boot are the units Target wants, started at boot.
	Boot []string
	// HostNetwork keeps the host's network namespace (default: a new,
	// empty one, so that no service started inside can touch the host's
	// network).
	HostNetwork bool
	// Mask are more units to mask, on top of the built-in list.
	Mask []string
	// BootTimeout bounds the wait for systemd to reach "running"
	// (default 30 s; it takes about 2 s on the lab machine).
	BootTimeout time.Duration
}

// Systemd is a running confined systemd.
type Systemd struct {
	// PID is systemd's PID in the host's PID namespace.
	PID int

	dir  string
	name string

	ptmx, pts   *os.File
	console     *syncBuffer
	consoleDone chan struct{}
	cgroups     []string
	cmd         *exec.Cmd
	waited      chan error
}

// maskedUnits may never start inside the lab: they touch state shared with
// the machine (its /tmp, devices, sysctls, clock, network, persistent
// journal, consoles) or would boot the machine's services.
var maskedUnits = []string{
	"systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service",
	"systemd-tmpfiles-setup-dev-early.service", "systemd-tmpfiles-clean.service",
	"systemd-tmpfiles-clean.timer",
	"systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
	"systemd-udev-trigger.service", "systemd-udev-settle.service",
	"systemd-sysctl.service", "systemd-modules-load.service", "systemd-remount-fs.service",
	"systemd-random-seed.service", "systemd-timesyncd.service",
	"systemd-networkd.service", "systemd-networkd.socket", "systemd-resolved.service",
	"systemd-journald.service", "systemd-journald.socket", "systemd-journald-dev-log.socket",
	"systemd-journald-audit.socket", "systemd-journal-flush.service",
	"systemd-pstore.service", "systemd-machine-id-commit.service", "systemd-firstboot.service",
	"systemd-binfmt.service", "systemd-hwdb-update.service", "systemd-update-utmp.service",
	"systemd-logind.service", "dbus.service", "dbus.socket",
	"getty.target", "console-getty.service", "getty@tty1.service", "serial-getty@.service",
	"tmp.mount", "dev-hugepages.mount", "dev-mqueue.mount", "sys-kernel-debug.mount",
	"sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount", "sys-kernel-config.mount",
	"default.target", "multi-user.target", "graphical.target", "sysinit.target",
	"basic.target", "local-fs.target", "remote-fs.target", "timers.target",
	"sockets.target", "paths.target", "swap.target", "cryptsetup.target",
	"rescue.target", "emergency.target", "rescue.service", "emergency.service",
}

// Start boots systemd and registers its end with t.Cleanup. It fails the
// test if the host lacks what it needs or systemd does not reach a state
// where its D-Bus API answers.
func Start(t testing.TB, opt Options) *Systemd {
	t.Helper()
	testsupport.RequireRoot(t, "systemd as PID 1: PID and mount namespaces, cgroups")
	const systemdBin = "/lib/systemd/systemd"
	for _, p := range []string{systemdBin, "/usr/bin/unshare"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("systemdlab needs %s: %v", p, err)
		}
	}
	if opt.BootTimeout <= 0 {
		opt.BootTimeout = 30 * time.Second
	}
	// A short directory: the bus socket's path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "edgeheal-sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Systemd{dir: dir, name: "edgeheal-lab-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}

	// Units, the target and the masks, staged on the host and copied in.
	units := filepath.Join(s.dir, "units")
	if err := os.Mkdir(units, 0o755); err != nil {
		t.Fatal(err)
	}
	target := "[Unit]\nDescription=edgeheal lab boot target\nDefaultDependencies=no\n"
	for _, u := range append([]string{busProxy + ".socket"}, opt.Boot...) {
		target += "Wants=" + u + "\nAfter=" + u + "\n"
	}
	files := map[string]string{
		Target:                target,
		busProxy + ".socket":  fmt.Sprintf(busProxySocket, filepath.Join(s.dir, "bus.sock")),
		busProxy + ".service": busProxyService,
	}
	for n, c := range opt.Units {
		files[n] = c
	}
	for n, c := range files {
		if strings.ContainsAny(n, "/\n") {
			t.Fatalf("bad unit name %q", n)
		}
		if err := os.WriteFile(filepath.Join(units, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	masks := slices.Concat(maskedUnits, opt.Mask, machineUnits())
	masks = slices.DeleteFunc(masks, func(u string) bool { _, ours := files[u]; return ours })
	if err := os.WriteFile(filepath.Join(s.dir, "masks"), []byte(strings.Join(masks, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// PID 1 logs only to a terminal: give it a pty whose other end we read.
	consolePath, err := s.openConsole()
	if err != nil {
		t.Fatalf("allocating a pty for the console: %v", err)
	}
	t.Cleanup(s.closeConsole) // after stop: PID 1 is gone by then

	// The cgroup subtree, created before anything runs in it.
	s.cgroups, err = makeCgroups(s.name)
	t.Cleanup(s.removeCgroups) // also after a partial failure
	if err != nil {
		t.Fatalf("creating cgroups: %v", err)
	}

	// inner runs as PID 1 of the new namespaces, then becomes systemd.
	inner := `set -eu
# Our copy of the host's mounts under /run (e.g. /run/netns/*, other
# tests' namespaces) would keep what they hold alive: drop them first.
awk '$5 ~ "^/run/" {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
mount -t tmpfs -o mode=755,size=64m,nosuid,nodev edgeheal-lab-run /run
# systemd remounts the tmpfs that holds the cgroup hierarchies read-only, a
# superblock change the host would share: give it a private tmpfs with the
# host's hierarchies bound into it.
mkdir /run/edgeheal-lab-cgroup
mount --rbind /sys/fs/cgroup /run/edgeheal-lab-cgroup
mount -t tmpfs -o mode=755,size=1m,nosuid,nodev,noexec edgeheal-lab-cgroup /sys/fs/cgroup
for d in /run/edgeheal-lab-cgroup/*; do
	n=${d##*/}
	if [ -L "$d" ]; then ln -s "$(readlink "$d")" "/sys/fs/cgroup/$n"
	elif mountpoint -q "$d"; then mkdir "/sys/fs/cgroup/$n"; mount --bind "$d" "/sys/fs/cgroup/$n"
	fi
done
umount -l /run/edgeheal-lab-cgroup
rmdir /run/edgeheal-lab-cgroup
mount -o bind,remount,ro /sys
mount --bind /proc/sys /proc/sys
mount -o bind,remount,ro /proc/sys
mount --bind "$CONSOLE" /dev/console
mkdir -p /run/systemd/system
cp "$LAB"/units/* /run/systemd/system/
while read -r u; do [ -n "$u" ] && ln -sf /dev/null "/run/systemd/system/$u"; done < "$LAB/masks"
exec env -i container=edgeheal-lab /lib/systemd/systemd --unit=` + Target + ` --log-target=console
`
	var outer strings.Builder
	outer.WriteString("set -eu\n")
	for _, cg := range s.cgroups {
		fmt.Fprintf(&outer, "echo 0 > %q/cgroup.procs\n", cg)
	}
	ns := "--pid --fork --kill-child --mount --mount-proc --uts --propagation private"
	if !opt.HostNetwork {
		ns += " --net"
	}
	fmt.Fprintf(&outer, "exec /usr/bin/unshare %s /bin/sh -c %s\n", ns, shellQuote(inner))

	cmd := exec.Command("/bin/sh", "-c", outer.String())
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LAB=" + s.dir, "CONSOLE=" + consolePath}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := os.Create(filepath.Join(s.dir, "unshare.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting unshare: %v", err)
	}
	s.cmd = cmd
	s.waited = make(chan error, 1)
	go func() { s.waited <- cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })

	ctx, cancel := context.WithTimeout(context.Background(), opt.BootTimeout)
	defer cancel()
	if err := s.waitBooted(ctx); err != nil {
		t.Fatalf("booting systemd: %v\nunshare: %s\nconsole:\n%s", err, s.readFile("unshare.log"), s.Console())
	}
	return s
}

// machineUnits lists the units the machine enables (the names in
// /etc/systemd/system/*.wants): its own services must never start here.
func machineUnits() []string {
	var out []string
	wants, _ := filepath.Glob("/etc/systemd/system/*.wants/*")
	for _, w := range wants {
		out = append(out, filepath.Base(w))
	}
	return out
}

// makeCgroups creates name in every hierarchy systemd uses: the unified
// (v2) one and, on a hybrid host, the name=systemd v1 one.
func makeCgroups(name string) ([]string, error) {
	var roots []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{"/sys/fs/cgroup"} // pure cgroup v2
	} else {
		for _, r := range []string{"/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"} {
			if _, err := os.Stat(filepath.Join(r, "cgroup.procs")); err == nil {
				roots = append(roots, r)
			}
		}
	}
	if len(roots) == 0 {
		return nil, errors.New("no systemd or unified cgroup hierarchy under /sys/fs/cgroup")
	}
	var made []string
	for _, r := range roots {
		d := filepath.Join(r, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return made, err
		}
		made = append(made, d)
	}
	return made, nil
}

// waitBooted finds systemd (the child of unshare), then polls its D-Bus
// API until the manager reports a settled state.
func (s *Systemd) waitBooted(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case err := <-s.waited:
			s.waited <- err
			return fmt.Errorf("unshare exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
		if s.PID == 0 {
			pid, err := childOf(s.cmd.Process.Pid)
			if err != nil {
				last = err
				continue
			}
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "systemd" {
				last = fmt.Errorf("PID 1 is %q, not systemd yet", strings.TrimSpace(string(comm)))
				continue
			}
			s.PID = pid
		}
		state, err := s.systemState(ctx)
		if err != nil {
			last = err
			continue
		}
		switch state {
		case "running", "degraded":
			return nil
		case "maintenance", "stopping", "offline":
			return fmt.Errorf("system state %q", state)
		}
		last = fmt.Errorf("system state %q", state)
	}
}

func (s *Systemd) systemState(ctx context.Context) (string, error) {
	c, err := s.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	p, err := c.GetManagerProperty("SystemState")
	if err != nil {
		return "", err
	}
	return strings.Trim(p, `"`), nil
}

// busProxy forwards a socket the host can reach to systemd's private D-Bus
// socket. A direct connection (through /proc/<pid>/root) is reset: systemd
// checks the peer's credentials and a PID from outside its PID namespace
// reads as 0, which it rejects (systemd 252, getpeercred: ENODATA). The
// proxy runs inside the namespace, so its PID is valid there.
const (
	busProxy       = "edgeheal-lab-bus"
	busProxySocket = `[Unit]
Description=edgeheal lab: systemd's D-Bus API for the host
DefaultDependencies=no

[Socket]
ListenStream=%s
SocketMode=0600
`
	busProxyService = `[Unit]
Description=edgeheal lab: systemd's D-Bus API for the host
DefaultDependencies=no
Requires=edgeheal-lab-bus.socket
After=edgeheal-lab-bus.socket

[Service]
ExecStart=/lib/systemd/systemd-socket-proxyd /run/systemd/private
StandardOutput=null
`
)

// Conn connects to the confined systemd's private D-Bus API (no
// dbus-daemon) through the bus proxy. The caller closes it.
func (s *Systemd) Conn(ctx context.Context) (*sddbus.Conn, error) {
	path := filepath.Join(s.dir, "bus.sock")
	return sddbus.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+path, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
}

// Path is p as seen inside the confined systemd's mount namespace,
// reachable from the host.
func (s *Systemd) Path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", s.PID, p)
}

// Console is what systemd logged so far.
func (s *Systemd) Console() string {
	if s.console == nil {
		return ""
	}
	return s.console.String()
}

// openConsole opens a pty master, keeps reading it into s.console and
// returns the path of the slave, which the boot script binds over
// /dev/console.
func (s *Systemd) openConsole() (string, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return "", fmt.Errorf("unlocking pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return "", fmt.Errorf("pty number: %w", err)
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	// Hold the slave open ourselves: with no slave open, reading the
	// master returns EIO at once (before systemd opened its console).
	pts, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return "", err
	}
	s.ptmx, s.pts = m, pts
	s.console = &syncBuffer{}
	s.consoleDone = make(chan struct{})
	go func() {
		defer close(s.consoleDone)
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			s.console.Write(buf[:n])
			if err != nil {
				return // EIO once no one has the slave open, or closed
			}
		}
	}()
	return path, nil
}

func (s *Systemd) closeConsole() {
	if s.ptmx == nil {
		return
	}
	s.pts.Close()
	s.ptmx.Close()
	select {
	case <-s.consoleDone:
	case <-time.After(2 * time.Second): // a read blocked past Close; the fd is gone anyway
	}
}

// syncBuffer is a bounded, concurrency-safe log buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (b *syncBuffer) Write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.b) < 1<<20 {
		b.b = append(b.b, p...)
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

func (s *Systemd) readFile(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	return string(b)
}

// stop kills PID 1 (the kernel then kills the whole PID namespace), reaps
// unshare and waits for the cgroups to empty. Bounded: 10 s in all.
func (s *Systemd) stop(t testing.TB) {
	tmps := s.privateTmps()
	if s.PID > 0 {
		_ = syscall.Kill(s.PID, syscall.SIGKILL)
	}
	defer func() {
		for _, d := range tmps {
			if err := os.RemoveAll(d); err != nil {
				t.Errorf("systemdlab: removing a unit's private /tmp: %v", err)
			}
		}
	}()
	select {
	case <-s.waited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill() // unshare itself, by its PID
		select {
		case <-s.waited:
		case <-time.After(5 * time.Second):
			t.Errorf("systemdlab: unshare (pid %d) did not exit", s.cmd.Process.Pid)
		}
	}
	if t.Failed() {
		t.Logf("systemdlab console:\n%s", s.Console())
	}
}

// privateTmps lists the PrivateTmp= directories (systemd-private-*) the
// lab's processes have as their /tmp or /var/tmp. They are in the
// machine's /tmp and /var/tmp (the lab does not mount over those: tests
// share files there), and systemd removes a unit's only when the unit
// stops, not when PID 1 is killed. Only directories named in the mount
// table of a process of the lab's own cgroups are listed, so never one of
// the machine's.
func (s *Systemd) privateTmps() []string {
	found := map[string]bool{}
	for _, cg := range s.cgroups {
		_ = filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			procs, _ := os.ReadFile(p)
			for _, pid := range strings.Fields(string(procs)) {
				mounts, _ := os.ReadFile("/proc/" + pid + "/mountinfo")
				for _, line := range strings.Split(string(mounts), "\n") {
					f := strings.Fields(line) // id parent dev root mountpoint ...
					if len(f) < 5 || (f[4] != "/tmp" && f[4] != "/var/tmp") {
						continue
					}
					for _, part := range strings.Split(f[3], "/") {
						if !strings.HasPrefix(part, "systemd-private-") {
							continue
						}
						for _, base := range []string{"/tmp", "/var/tmp"} {
							if st, err := os.Lstat(filepath.Join(base, part)); err == nil && st.IsDir() {
								found[filepath.Join(base, part)] = true
							}
						}
					}
				}
			}
			return nil
		})
	}
	out := make([]string, 0, len(found))
	for d := range found {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// removeCgroups removes the subtree bottom-up once it has no processes
// left, polling for at most 5 s (killed processes take a moment to go).
func (s *Systemd) removeCgroups() {
	deadline := time.Now().Add(5 * time.Second)
	// systemd also makes <name> in the v1 controller hierarchies it uses
	// (memory, pids, ...): the name is unique, so every match is ours.
	roots := slices.Clone(s.cgroups)
	if more, _ := filepath.Glob("/sys/fs/cgroup/*/" + s.name); len(more) > 0 {
		roots = append(roots, more...)
	}
	slices.Sort(roots)
	roots = slices.Compact(roots)
	for _, root := range roots {
		for {
			err := removeTree(root)
			if err == nil || errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// removeTree rmdirs every cgroup directory under root, deepest first
// (cgroupfs directories are removed with rmdir, never unlink).
func removeTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// childOf returns the only child of pid.
func childOf(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Split(bufio.ScanWords)
	if !sc.Scan() {
		return 0, fmt.Errorf("process %d has no child yet", pid)
	}
	return strconv.Atoi(sc.Text())
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
