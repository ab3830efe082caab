package pkgtest

// The fleet view's packages: edgeheal-fleet_<v>-1_<arch>.deb and
// edgeheal-fleet-<v>-1.<arch>.rpm, built by the same packaging/build.sh.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fleetDebPath(arch string) string { return namedDebPath("edgeheal-fleet", arch) }

func fleetRpmPath(arch string) string { return namedRpmPath("edgeheal-fleet", arch) }

func wantFleetPayload(format string) map[string]entry {
	w := wantProgramPayload("edgeheal-fleet", format)
	w["/etc/edgeheal-fleet"] = entry{"drwxr-xr-x", "root/root"}
	for _, f := range []string{
		"/etc/edgeheal-fleet/config.yaml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.yml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.test.yml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.alertmanager.yml",
		"/usr/share/doc/edgeheal-fleet/fleet.md.gz",
	} {
		w[f] = entry{"-rw-r--r--", "root/root"}
	}
	return w
}

// wantProgramPayload is what the package of a program beside the agent
// (edgeheal-fleet, edgeheal-kube) holds in any case: the binary, its
// unit, /usr/share/<name>, its man page, copyright, and the changelog and
// lintian overrides (deb) or the preset (rpm).
func wantProgramPayload(name, format string) map[string]entry {
	dir := entry{"drwxr-xr-x", "root/root"}
	file := entry{"-rw-r--r--", "root/root"}
	w := map[string]entry{
		"/usr/bin/" + name: {"-rwxr-xr-x", "root/root"},
		"/usr/lib/systemd/system/" + name + ".service": file,
		"/usr/share/" + name:                           dir,
		"/usr/share/doc/" + name:                       dir,
		"/usr/share/doc/" + name + "/copyright":        file,
		"/usr/share/man/man1/" + name + ".1.gz":        file,
	}
	switch format {
	case "deb":
		w["/usr/share/doc/"+name+"/changelog.Debian.gz"] = file
		w["/usr/share/lintian/overrides/"+name] = file
	case "rpm":
		w["/usr/lib/systemd/system-preset/90-"+name+".preset"] = file
	}
	return w
}

func TestFleetPackagesHoldEveryFileWithItsMode(t *testing.T) {
	built(t)
	checkPayloads(t, "edgeheal-fleet", wantFleetPayload)
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
		"/usr/lib/systemd/system/edgeheal-fleet.service":            "packaging/fleet/edgeheal-fleet.service",
		"/etc/edgeheal-fleet/config.yaml":                           "packaging/fleet/config.yaml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.yml":        "packaging/fleet/edgeheal-fleet.rules.yml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.rules.test.yml":   "packaging/fleet/edgeheal-fleet.rules.test.yml",
		"/usr/share/edgeheal-fleet/edgeheal-fleet.alertmanager.yml": "packaging/fleet/edgeheal-fleet.alertmanager.yml",
	} {
		got, _ := os.ReadFile(filepath.Join(root, pkgPath))
		want, err := os.ReadFile(filepath.Join(repo, repoPath))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the package differs from %s (%v)", pkgPath, repoPath, err)
		}
	}
}

func TestFleetBinaryIsStatic(t *testing.T) {
	built(t)
	checkStaticBinaries(t, "edgeheal-fleet")
}

// The fleet view and the Kubernetes reporter are packages of their own:
// the agent's package carries neither (its fleet templates aside), and
// neither carries the agent.
func TestTheAgentPackageCarriesNeitherTheFleetViewNorTheReporter(t *testing.T) {
	built(t)
	for p := range debPayload(t, debPath("amd64")) {
		// Its manual's page on Kubernetes (docs/operations/kubernetes.md) is the agent's.
		manual := strings.HasPrefix(p, "/usr/share/doc/edgeheal/")
		if (strings.Contains(p, "fleet") && !strings.HasPrefix(p, "/usr/share/edgeheal/fleet")) || (strings.Contains(p, "kube") && !manual) {
			t.Errorf("the agent's package holds %s", p)
		}
	}
	for _, name := range []string{"edgeheal-fleet", "edgeheal-kube"} {
		if _, ok := debPayload(t, namedDebPath(name, "amd64"))["/usr/bin/edgeheal"]; ok {
			t.Errorf("the %s package holds the agent", name)
		}
	}
}

func TestFleetDebIsLintianClean(t *testing.T) {
	built(t)
	checkLintianClean(t, "edgeheal-fleet")
}

// The fleet view needs no privilege at all: its unit's exposure must stay
// at or under 1.5 (docs/fleet.md, "The systemd unit": 1.1 on systemd 252).
func TestFleetUnitSecurityExposureStaysLow(t *testing.T) {
	checkExposure(t, "fleet/edgeheal-fleet.service", 15)
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
	}
	out := output(t, "rpm", "-qp", "--scripts", fleetRpmPath("amd64"))
	for _, n := range []string{"systemctl --no-reload preset edgeheal-fleet.service", "systemctl --no-reload disable --now edgeheal-fleet.service", "systemctl try-restart edgeheal-fleet.service"} {
		if !strings.Contains(out, n) {
			t.Errorf("rpm scripts lack %q", n)
		}
	}
	checkCarriesScripts(t, "edgeheal-fleet", "fleet/scripts")
}
