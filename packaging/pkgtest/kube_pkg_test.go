package pkgtest

// The Kubernetes reporter's packages: edgeheal-kube_<v>-1_<arch>.deb and
// edgeheal-kube-<v>-1.<arch>.rpm, built by the same packaging/build.sh
// from packaging/kubernetes/.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeheal/edgeheal/internal/testsupport"
)

func kubeDebPath(arch string) string { return namedDebPath("edgeheal-kube", arch) }

func kubeRpmPath(arch string) string { return namedRpmPath("edgeheal-kube", arch) }

func wantKubePayload(format string) map[string]entry {
	w := wantProgramPayload("edgeheal-kube", format)
	w["/usr/share/edgeheal-kube/rbac.yaml"] = entry{"-rw-r--r--", "root/root"}
	w["/usr/share/doc/edgeheal-kube/kubernetes.md.gz"] = entry{"-rw-r--r--", "root/root"} // its part of the manual
	return w
}

func TestKubePackagesHoldEveryFileWithItsMode(t *testing.T) {
	built(t)
	checkPayloads(t, "edgeheal-kube", wantKubePayload)
}

// The reporter has no configuration of its own (its kubernetes section is
// in the agent's files): no conffile, no %config; the unit, the RBAC
// manifest and the preset are the repository's.
func TestKubePackagesHaveNoConfigAndCarryTheRepositoryFiles(t *testing.T) {
	built(t)
	ctrl := output(t, "sh", "-c", `dpkg-deb --ctrl-tarfile "$1" | tar -t`, "sh", kubeDebPath("amd64"))
	if strings.Contains(ctrl, "conffiles") {
		t.Errorf("the .deb has conffiles (control: %q); it owns no configuration", ctrl)
	}
	out := output(t, "rpm", "-qp", "--qf", "[%{FILEFLAGS:fflags}|%{FILENAMES}\n]", kubeRpmPath("amd64"))
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if flags, name, _ := strings.Cut(line, "|"); strings.Contains(flags, "c") {
			t.Errorf("rpm %%config file %s (flags %s); it owns no configuration", name, flags)
		}
	}
	root := extractDeb(t, kubeDebPath("amd64"))
	rpmRoot := t.TempDir()
	output(t, "sh", "-c", `rpm2archive - <"$1" | tar -xz -C "$2"`, "sh", kubeRpmPath("amd64"), rpmRoot)
	for _, f := range []struct{ root, pkgPath, repoPath string }{
		{root, "/usr/lib/systemd/system/edgeheal-kube.service", "packaging/kubernetes/edgeheal-kube.service"},
		{root, "/usr/share/edgeheal-kube/rbac.yaml", "packaging/kubernetes/rbac.yaml"},
		{rpmRoot, "/usr/lib/systemd/system/edgeheal-kube.service", "packaging/kubernetes/edgeheal-kube.service"},
		{rpmRoot, "/usr/lib/systemd/system-preset/90-edgeheal-kube.preset", "packaging/kubernetes/90-edgeheal-kube.preset"},
	} {
		got, _ := os.ReadFile(filepath.Join(f.root, f.pkgPath))
		want, err := os.ReadFile(filepath.Join(repo, f.repoPath))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the package differs from %s (%v)", f.pkgPath, f.repoPath, err)
		}
	}
}

// Without the agent the reporter has nothing to read: both formats depend
// on the edgeheal package.
func TestKubePackagesDependOnTheAgent(t *testing.T) {
	built(t)
	deps := output(t, "dpkg-deb", "--field", kubeDebPath("amd64"), "Depends")
	if !strings.Contains(", "+strings.TrimSpace(deps)+",", ", edgeheal,") {
		t.Errorf("the .deb's Depends: %q, want edgeheal in it", deps)
	}
	reqs := strings.Split(strings.TrimSpace(output(t, "rpm", "-qp", "--requires", kubeRpmPath("amd64"))), "\n")
	found := false
	for _, r := range reqs {
		found = found || strings.TrimSpace(r) == "edgeheal"
	}
	if !found {
		t.Errorf("the .rpm requires %q, want edgeheal among them", reqs)
	}
}

func TestKubeBinaryIsStatic(t *testing.T) {
	built(t)
	checkStaticBinaries(t, "edgeheal-kube")
}

func TestKubeDebIsLintianClean(t *testing.T) {
	built(t)
	checkLintianClean(t, "edgeheal-kube")
}

// The reporter runs as root for the K3s kubeconfig's sake, with no
// capability: its exposure must stay at or under 1.5 (docs/operations/kubernetes.md,
// "The reporter's unit": 1.4 on systemd 252).
func TestKubeUnitSecurityExposureStaysLow(t *testing.T) {
	checkExposure(t, "kubernetes/edgeheal-kube.service", 15)
}

// TestLabUnitsPassSystemdAnalyzeVerify runs systemd-analyze verify on each
// package's unit with its package's binary in place (a read-only overlay
// on /usr/bin in a private mount namespace: verify checks that ExecStart
// is executable). The man pages of Documentation= are checked by the
// payload tests, so --man=no.
func TestLabUnitsPassSystemdAnalyzeVerify(t *testing.T) {
	built(t)
	testsupport.RequireRoot(t, "a private mount namespace with the payload's /usr/bin")
	for _, name := range []string{"edgeheal", "edgeheal-fleet", "edgeheal-kube"} {
		t.Run(name, func(t *testing.T) {
			payload := extractDeb(t, namedDebPath(name, "amd64"))
			unit := filepath.Join(payload, "usr/lib/systemd/system", name+".service")
			shell := `mount -t overlay edgeheal-pkgtest-usrbin -o "lowerdir=$1/usr/bin:/usr/bin" /usr/bin && exec systemd-analyze verify --man=no "$2"`
			out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", shell, "sh", payload, unit).CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("systemd-analyze verify %s.service: %v\n%s", name, err, out)
			}
		})
	}
}

// The packages carry the scripts TestLabKubeMaintainerScripts runs.
func TestKubePackagesCarryTheTestedScripts(t *testing.T) {
	built(t)
	checkCarriesScripts(t, "edgeheal-kube", "kubernetes/scripts")
}

// The reporter's scripts are what dh_installsystemd --no-enable --no-start
// and the %systemd_* macros generate: an install enables and starts
// nothing (it needs the kubernetes section first), an upgrade keeps the
// admin's choice and try-restarts.
func TestLabKubeMaintainerScripts(t *testing.T) {
	needRoot(t)
	const dir = "kubernetes/scripts"
	runScripts(t, []scriptCase{
		{
			name: "a first install enables and starts nothing",
			run:  scriptRun{dir: dir, script: "deb-postinst", args: []string{"configure", ""}, systemdRunning: true, wasEnabled: true},
			want: []string{
				"deb-systemd-helper debian-installed edgeheal-kube.service",
				"deb-systemd-helper update-state edgeheal-kube.service",
				"systemctl --system daemon-reload",
			},
		},
		{
			name: "an upgrade keeps the admin's enable and try-restarts the reporter",
			run: scriptRun{dir: dir, script: "deb-postinst", args: []string{"configure", "0.1.0-1"}, systemdRunning: true,
				wasEnabled: true, debianInstalled: true},
			want: []string{
				"deb-systemd-helper debian-installed edgeheal-kube.service",
				"deb-systemd-helper unmask edgeheal-kube.service",
				"deb-systemd-helper --quiet was-enabled edgeheal-kube.service",
				"deb-systemd-helper enable edgeheal-kube.service",
				"deb-systemd-helper update-state edgeheal-kube.service",
				"systemctl --system daemon-reload",
				"deb-systemd-invoke try-restart edgeheal-kube.service",
			},
		},
		{
			name: "an upgrade of a reporter never enabled enables nothing",
			run: scriptRun{dir: dir, script: "deb-postinst", args: []string{"configure", "0.1.0-1"}, systemdRunning: true,
				debianInstalled: true},
			want: []string{
				"deb-systemd-helper debian-installed edgeheal-kube.service",
				"deb-systemd-helper unmask edgeheal-kube.service",
				"deb-systemd-helper --quiet was-enabled edgeheal-kube.service",
				"deb-systemd-helper update-state edgeheal-kube.service",
				"systemctl --system daemon-reload",
				"deb-systemd-invoke try-restart edgeheal-kube.service",
			},
		},
		{
			name: "an install without a running systemd only records the state",
			run:  scriptRun{dir: dir, script: "deb-postinst", args: []string{"configure", ""}},
			want: []string{
				"deb-systemd-helper debian-installed edgeheal-kube.service",
				"deb-systemd-helper update-state edgeheal-kube.service",
			},
		},
		{
			name: "a removal stops the reporter",
			run:  scriptRun{dir: dir, script: "deb-prerm", args: []string{"remove"}, systemdRunning: true},
			want: []string{"deb-systemd-invoke stop edgeheal-kube.service"},
		},
		{
			name: "an upgrade does not stop it in prerm",
			run:  scriptRun{dir: dir, script: "deb-prerm", args: []string{"upgrade", "1.0.0-1"}, systemdRunning: true},
			want: nil,
		},
		{
			name: "a removal masks the unit",
			run:  scriptRun{dir: dir, script: "deb-postrm", args: []string{"remove"}, systemdRunning: true},
			want: []string{"systemctl --system daemon-reload", "deb-systemd-helper mask edgeheal-kube.service"},
		},
		{
			name: "a purge forgets the unit",
			run:  scriptRun{dir: dir, script: "deb-postrm", args: []string{"purge"}, systemdRunning: true},
			want: []string{
				"systemctl --system daemon-reload",
				"deb-systemd-helper purge edgeheal-kube.service",
				"deb-systemd-helper unmask edgeheal-kube.service",
			},
		},
		{
			name: "an rpm install applies the preset (disable) and starts nothing",
			run:  scriptRun{dir: dir, script: "rpm-post", args: []string{"1"}, systemdRunning: true},
			want: []string{"systemctl --no-reload preset edgeheal-kube.service"},
		},
		{
			name: "%post of an rpm upgrade keeps the admin's enablement",
			run:  scriptRun{dir: dir, script: "rpm-post", args: []string{"2"}, systemdRunning: true},
			want: nil,
		},
		{
			name: "%postun of an rpm upgrade try-restarts the reporter",
			run:  scriptRun{dir: dir, script: "rpm-postun", args: []string{"1"}, systemdRunning: true},
			want: []string{"systemctl daemon-reload", "systemctl try-restart edgeheal-kube.service"},
		},
		{
			name: "an rpm erase disables and stops it",
			run:  scriptRun{dir: dir, script: "rpm-preun", args: []string{"0"}, systemdRunning: true},
			want: []string{"systemctl --no-reload disable --now edgeheal-kube.service"},
		},
	})
}
