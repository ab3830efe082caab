package outbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/edgeheal/edgeheal/agent"
)

const fullDiskEnv = "EDGEHEAL_REPORT_FULLDISK"

// TestLabOutboxSurvivesAFullDisk fills a tiny tmpfs (mounted in a private
// mount namespace of a child process, so nothing outside sees it) until
// Append fails, then frees space and checks that every event Append
// accepted is still there, none it refused, and the log has no torn record.
func TestLabOutboxSurvivesAFullDisk(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	dir := t.TempDir()
	script := fmt.Sprintf("mount -t tmpfs -o size=96k tmpfs %s && exec %s -test.run='^TestHelperFullDisk$' -test.count=1 -test.v", dir, os.Args[0])
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), fullDiskEnv+"="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil || !strings.Contains(out.String(), "FULLDISK-OK") {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	t.Log(strings.TrimSpace(lastLine(out.String(), "FULLDISK-OK")))
}

func lastLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestHelperFullDisk is the child of TestLabOutboxSurvivesAFullDisk.
func TestHelperFullDisk(t *testing.T) {
	dir := os.Getenv(fullDiskEnv)
	if dir == "" {
		return
	}
	// Leave room to free later: a filler file.
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 32<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	ob, err := Open(dir, Options{Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 700)
	var accepted []string
	refused := 0
	for i := 0; refused < 5 && i < 10000; i++ {
		id := fmt.Sprintf("e%05d", i)
		if err := ob.Append(agent.Event{ID: id, Kind: "incident", Summary: big}); err != nil {
			refused++
			continue
		}
		accepted = append(accepted, id)
	}
	if refused == 0 {
		t.Fatal("the disk never filled")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := ob.Append(agent.Event{ID: "after", Kind: "incident"}); err != nil {
		t.Fatalf("append after freeing space: %v", err)
	}
	accepted = append(accepted, "after")
	ob.Close()
	ob2, err := Open(dir, Options{Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	defer ob2.Close()
	got := ids(ob2.Pending(0))
	if strings.Join(got, ",") != strings.Join(accepted, ",") {
		t.Fatalf("after reopen %d events, want the %d accepted ones\n got %v\nwant %v", len(got), len(accepted), got, accepted)
	}
	if ob2.Truncated() != 0 {
		t.Fatalf("the log had a torn record: %d bytes cut", ob2.Truncated())
	}
	fmt.Printf("FULLDISK-OK %d accepted, %d refused while full, all accepted ones kept\n", len(accepted), refused)
}
