// Package ktrace reads the kernel's own record of when network devices
// changed, so that the lab can time what the agent does to a link by the
// kernel's clock rather than by when a goroutine of the lab got to look.
//
// It enables one tracepoint, notifier:notifier_run, filtered to the
// ethtool netlink notifier (ethnl_netdev_event), in a trace instance of its
// own: every netdevice notifier event (a link registered, brought up, its
// features changed) is recorded with the kernel's monotonic clock and the
// process and thread that caused it. tracefs is mounted in a private mount
// namespace of one locked thread and left at once (lazily unmounted): what
// stays is open files, and the instance is removed at Close. docs/lab.md
// ("Timing a re-plug by the kernel's clock") says why and what it shows.
package ktrace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// instancePrefix names this package's trace instances; a leftover of a
// process that died is removed by the next Open.
const instancePrefix = "edgeheal-lab-"

// Event is one netdevice notifier event.
type Event struct {
	At   time.Duration // CLOCK_MONOTONIC
	TGID int           // the process whose thread caused it
	TID  int
	Comm string
	// Kernel: a kernel thread's (a kworker's linkwatch work, which follows
	// a link's carrier), not a process's.
	Kernel bool
}

// Trace is an open trace instance.
type Trace struct {
	instances *os.File // tracefs instances/
	dir       *os.File // instances/<name>
	name      string
}

var seq atomic.Int64

// Now is CLOCK_MONOTONIC, the clock the trace's events carry.
func Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

// OpenNetdevEvents starts recording netdevice notifier events. It needs
// root and a kernel with tracepoints (CONFIG_EVENT_TRACING); the error says
// which step failed.
func OpenNetdevEvents() (*Trace, error) {
	instances, err := mountInstances()
	if err != nil {
		return nil, err
	}
	removeLeftovers(instances)
	t := &Trace{instances: instances, name: fmt.Sprintf("%s%d-%d", instancePrefix, os.Getpid(), seq.Add(1))}
	if err := unix.Mkdirat(int(instances.Fd()), t.name, 0o700); err != nil {
		instances.Close()
		return nil, fmt.Errorf("creating trace instance %s: %w", t.name, err)
	}
	fd, err := unix.Openat(int(instances.Fd()), t.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unlinkat(int(instances.Fd()), t.name, unix.AT_REMOVEDIR)
		instances.Close()
		return nil, fmt.Errorf("opening trace instance %s: %w", t.name, err)
	}
	t.dir = os.NewFile(uintptr(fd), t.name)
	for _, w := range []struct{ file, value string }{
		{"trace_clock", "mono"},
		{"options/record-tgid", "1"},
		{"events/notifier/notifier_run/filter", "cb.function == ethnl_netdev_event"},
		{"events/notifier/notifier_run/enable", "1"},
	} {
		if err := t.write(w.file, w.value); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// mountInstances mounts tracefs in a private mount namespace of a thread of
// its own, opens its instances directory and detaches the mount: nothing is
// left mounted anywhere, and the open directory keeps the file system
// reachable. The thread is never unlocked, so it ends with its goroutine
// and takes its mount namespace with it.
func mountInstances() (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := func() (*os.File, error) {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return nil, fmt.Errorf("a private mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return nil, fmt.Errorf("making mounts private: %w", err)
			}
			dir, err := os.MkdirTemp("", "edgeheal-tracefs-")
			if err != nil {
				return nil, err
			}
			defer os.Remove(dir)
			if err := unix.Mount("tracefs", dir, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
				return nil, fmt.Errorf("mounting tracefs: %w", err)
			}
			defer unix.Unmount(dir, unix.MNT_DETACH)
			return os.Open(dir + "/instances")
		}()
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// removeLeftovers removes instances of this package whose process is gone.
func removeLeftovers(instances *os.File) {
	names, err := instances.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, instancePrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = unix.Unlinkat(int(instances.Fd()), n, unix.AT_REMOVEDIR)
		}
	}
}

func (t *Trace) open(file string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(t.dir.Fd()), file, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("trace instance %s: opening %s: %w", t.name, file, err)
	}
	return os.NewFile(uintptr(fd), file), nil
}

func (t *Trace) write(file, value string) error {
	f, err := t.open(file, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("trace instance %s: writing %q to %s: %w", t.name, value, file, err)
	}
	return nil
}

// Take returns the events recorded since the last Take (or Open) and
// clears the buffer. An event recorded while Take runs can be lost with
// the clearing: take between the moments measured, not during them.
func (t *Trace) Take() ([]Event, error) {
	f, err := t.open("trace", unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("trace instance %s: reading: %w", t.name, err)
	}
	evs, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("trace instance %s: %w", t.name, err)
	}
	for i := range evs {
		evs[i].Kernel = isKernelThread(evs[i].TID)
	}
	clear, err := t.open("trace", unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return nil, err
	}
	return evs, clear.Close()
}

// Close stops the recording and removes the instance.
func (t *Trace) Close() error {
	_ = t.write("events/notifier/notifier_run/enable", "0")
	t.dir.Close()
	err := unix.Unlinkat(int(t.instances.Fd()), t.name, unix.AT_REMOVEDIR)
	t.instances.Close()
	if err != nil {
		return fmt.Errorf("removing trace instance %s: %w", t.name, err)
	}
	return nil
}

// pfKthread is PF_KTHREAD, the flag of a kernel thread in
// /proc/<pid>/stat's ninth field.
const pfKthread = 0x00200000

// isKernelThread reports whether tid is a kernel thread now. A thread that
// is gone is taken for a process's: kernel threads stay.
func isKernelThread(tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tid))
	if err != nil {
		return false
	}
	// The command, in parentheses, may hold spaces: the fields after it
	// start at the last ')'. Then: state, ppid, pgrp, session, tty_nr,
	// tpgid, flags.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfKthread != 0
}

// parse reads the trace file's lines, with record-tgid on:
//
//	ethtool-12311   (  12311) [001] ..... 26696.215363: notifier_run: ethnl_netdev_event
//
// The command may hold spaces and dashes: it is everything before the last
// dash ahead of the TGID's parenthesis.
func parse(b []byte) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		ev, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("trace line %q: %w", line, err)
		}
		evs = append(evs, ev)
	}
	return evs, sc.Err()
}

func parseLine(line string) (Event, error) {
	var ev Event
	open := strings.Index(line, "(")
	shut := strings.Index(line, ")")
	if open < 0 || shut < open {
		return ev, errors.New("no TGID (record-tgid off?)")
	}
	task := strings.TrimSpace(line[:open])
	dash := strings.LastIndex(task, "-")
	if dash < 0 {
		return ev, errors.New("no task-pid")
	}
	ev.Comm = task[:dash]
	var err error
	if ev.TID, err = strconv.Atoi(task[dash+1:]); err != nil {
		return ev, fmt.Errorf("thread id: %w", err)
	}
	if tgid := strings.TrimSpace(line[open+1 : shut]); tgid != "" && strings.Trim(tgid, "-") != "" {
		if ev.TGID, err = strconv.Atoi(tgid); err != nil {
			return ev, fmt.Errorf("TGID: %w", err)
		}
	}
	// After the TGID: [cpu] flags timestamp: event: ...
	fields := strings.Fields(line[shut+1:])
	if len(fields) < 3 {
		return ev, errors.New("too few fields")
	}
	ts, ok := strings.CutSuffix(fields[2], ":")
	if !ok {
		return ev, errors.New("no timestamp")
	}
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return ev, fmt.Errorf("timestamp: %w", err)
	}
	us, err := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	if err != nil {
		return ev, fmt.Errorf("timestamp: %w", err)
	}
	ev.At = time.Duration(s)*time.Second + time.Duration(us)*time.Microsecond
	return ev, nil
}
