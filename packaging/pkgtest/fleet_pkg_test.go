package pkgtest

// The fleet view's packages: edgeheal-fleet_<v>-1_<arch>.deb and
// edgeheal-fleet-<v>-1.<arch>.rpm, built by the same packaging/build.sh.

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fleetDebPath(arch string) string {
	return filepath.Join(dist, fmt.Sprintf("edgeheal-fleet_%s-1_%s.deb", version, arch))
}

func fleetRpmPath(arch string) string {
	rarch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]
	return filepath.Join(dist, fmt.Sprintf("edgeheal-fleet-%s-1.%s.rpm", version, rarch))
}

func wantFleetPayload(format string) map[string]entry {
	dir := entry{"drwxr-xr-x", "root/root"}
	file := entry{"-rw-r--r--", "root/root"}
	w := map[string]entry{
		"/etc/edgeheal-fleet":                                     dir,
		"/etc/edgeheal-fleet/config.yaml":                         file,
		"/usr/bin/edgeheal-fleet":                                 {"-rwxr-xr-x", "root/root"},
		"/usr/lib/systemd/system/edgeheal-fleet.service":          file,
		"/usr/share/edgeheal-fleet":                               dir,
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.yml":      file,
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.test.yml": file,
		"/usr/share/doc/edgeheal-fleet":                           dir,
		"/usr/share/doc/edgeheal-fleet/copyright":                 file,
		"/usr/share/doc/edgeheal-fleet/fleet.md.gz":               file,
		"/usr/share/man/man1/edgeheal-fleet.1.gz":                 file,
	}
	switch format {
	case "deb":
		w["/usr/share/doc/edgeheal-fleet/changelog.Debian.gz"] = file
		w["/usr/share/lintian/overrides/edgeheal-fleet"] = file
	case "rpm":
		w["/usr/lib/systemd/system-preset/90-edgeheal-fleet.preset"] = file
	}
	return w
}

func TestFleetPackagesHoldEveryFileWithItsMode(t *testing.T) {
	built(t)
	for _, arch := range arches {
		t.Run("deb "+arch, func(t *testing.T) {
			if diff := cmp.Diff(wantFleetPayload("deb"), debPayload(t, fleetDebPath(arch))); diff != "" {
				t.Errorf("payload of %s (-want +got):\n%s", fleetDebPath(arch), diff)
			}
		})
		t.Run("rpm "+arch, func(t *testing.T) {
			if diff := cmp.Diff(wantFleetPayload("rpm"), rpmPayload(t, fleetRpmPath(arch))); diff != "" {
				t.Errorf("payload of %s (-want +got):\n%s", fleetRpmPath(arch), diff)
			}
		})
	}
}

func TestFleetPackagesMarkOnlyTheirConfigAsConfigAndCarryTheRepositoryFiles(t *testing.T) {
	built(t)
	got := output(t, "sh", "-c", `dpkg-deb --ctrl-tarfile "$1" | tar -xO ./conffiles`, "sh", fleetDebPath("amd64"))
	if got != "/etc/edgeheal-fleet/config.yaml\n" {
		t.Errorf("conffiles = %q, want only /etc/edgeheal-fleet/config.yaml", got)
	}
	out := output(t, "rpm", "-qp", "--qf", "[%{FILEFLAGS:fflags}|%{FILENAMES}\n]", fleetRpmPath("amd64"))
	var configs []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if flags, name, _ := strings.Cut(line, "|"); strings.Contains(flags, "c") {
			configs = append(configs, flags+" "+name)
		}
	}
	if diff := cmp.Diff([]string{"cn /etc/edgeheal-fleet/config.yaml"}, configs); diff != "" {
		t.Errorf("rpm config files (-want +got):\n%s", diff)
	}
	root := extractDeb(t, fleetDebPath("amd64"))
	for pkgPath, repoPath := range map[string]string{
		"/usr/lib/systemd/system/edgeheal-fleet.service":          "packaging/fleet/edgeheal-fleet.service",
		"/etc/edgeheal-fleet/config.yaml":                         "packaging/fleet/config.yaml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.yml":      "packaging/fleet/edgeheal-fleet.rules.yml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.test.yml": "packaging/fleet/edgeheal-fleet.rules.test.yml",
	} {
		got, _ := os.ReadFile(filepath.Join(root, pkgPath))
		want, err := os.ReadFile(filepath.Join(repo, repoPath))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the package differs from %s (%v)", pkgPath, repoPath, err)
		}
	}
}

func TestFleetBinaryIsStaticAndLeanerThanTheAgent(t *testing.T) {
	built(t)
	for _, arch := range arches {
		root := extractDeb(t, fleetDebPath(arch))
		bin := filepath.Join(root, "usr", "bin", "edgeheal-fleet")
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: has an ELF interpreter: want a static binary", arch)
			}
		}
		f.Close()
		if got := packaged(t, arch, bin, "version"); got != "edgeheal-fleet "+version+"\n" {
			t.Errorf("edgeheal-fleet %s version = %q, want the package version", arch, got)
		}
	}
}

// The fleet package installs and runs nothing on the edge: the agent's
// package does not carry it, and it does not carry the agent.
func TestTheAgentPackageDoesNotCarryTheFleetView(t *testing.T) {
	built(t)
	for p := range debPayload(t, debPath("amd64")) {
		if strings.Contains(p, "fleet") && !strings.HasPrefix(p, "/usr/share/edgeheal/fleet") {
			t.Errorf("the agent's package holds %s", p)
		}
	}
	if _, ok := debPayload(t, fleetDebPath("amd64"))["/usr/bin/edgeheal"]; ok {
		t.Error("the fleet package holds the agent")
	}
}

func TestFleetDebIsLintianClean(t *testing.T) {
	built(t)
	for _, arch := range arches {
		out, err := exec.Command("lintian", "--pedantic", "--fail-on", "error,warning,info,pedantic", fleetDebPath(arch)).CombinedOutput()
		var tags []string
		for _, line := range strings.Split(string(out), "\n") {
			if line != "" && !strings.Contains(line, "running with root privileges") {
				tags = append(tags, line)
			}
		}
		if err != nil || len(tags) > 0 {
			t.Errorf("lintian %s: %v\n%s", arch, err, strings.Join(tags, "\n"))
		}
	}
}

// The fleet view needs no privilege at all: its unit's exposure must stay
// at or under 1.5 (docs/fleet.md, "The systemd unit": 1.1 on systemd 252).
func TestFleetUnitSecurityExposureStaysLow(t *testing.T) {
	unit := filepath.Join(repo, "packaging", "fleet", "edgeheal-fleet.service")
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=15", "--no-pager", unit).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Overall exposure level for edgeheal-fleet.service") {
		t.Errorf("systemd-analyze security: %v\n%s", err, out)
	}
}

func TestFleetMaintainerScriptsUseTheDistributionsHelpers(t *testing.T) {
	built(t)
	dir := t.TempDir()
	output(t, "dpkg-deb", "--control", fleetDebPath("amd64"), dir)
	for name, needle := range map[string]string{
		"postinst": "deb-systemd-helper enable 'edgeheal-fleet.service'",
		"prerm":    "deb-systemd-invoke stop 'edgeheal-fleet.service'",
		"postrm":   "deb-systemd-helper purge 'edgeheal-fleet.service'",
	} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(data), needle) {
			t.Errorf("%s lacks %q (%v)", name, needle, err)
		}
		if out, err := exec.Command("sh", "-n", filepath.Join(dir, name)).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", name, err, out)
		}
	}
	out := output(t, "rpm", "-qp", "--scripts", fleetRpmPath("amd64"))
	for _, n := range []string{"systemctl --no-reload preset edgeheal-fleet.service", "systemctl --no-reload disable --now edgeheal-fleet.service", "systemctl try-restart edgeheal-fleet.service"} {
		if !strings.Contains(out, n) {
			t.Errorf("rpm scripts lack %q", n)
		}
	}
}
