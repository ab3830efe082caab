package testsupport

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TmpfsEnv names the environment variable that tells a helper run by
// RunInTmpfs where its tmpfs is mounted.
const TmpfsEnv = "EDGEHEAL_TEST_TMPFS"

// RunInTmpfs runs the test helper named helper (a Test function of the
// running test binary that does nothing unless TmpfsEnv is set) in a
// private mount namespace of its own, with a tmpfs of sizeKiB mounted on a
// fresh temporary directory whose path is in TmpfsEnv. Nothing outside
// that child sees the mount; it goes away with the child. It returns the
// child's output, and fails t if the child failed. Needs root (the caller
// checks with RequireRoot).
func RunInTmpfs(t *testing.T, sizeKiB int, helper string, env ...string) string {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	dir := t.TempDir()
	script := fmt.Sprintf(`mount -t tmpfs -o size=%dk tmpfs "$1" && shift && exec "$@"`, sizeKiB)
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", dir,
		os.Args[0], "-test.run=^"+helper+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), TmpfsEnv+"="+dir), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !bytes.Contains(out.Bytes(), []byte("--- PASS: "+helper)) {
		t.Fatalf("%s in a %d KiB tmpfs: %v\n%s", helper, sizeKiB, err, out.String())
	}
	return out.String()
}
