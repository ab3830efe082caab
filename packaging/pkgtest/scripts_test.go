package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/google/go-cmp/cmp"
)

// fakeTools are the commands maintainer scripts call; each fake logs its
// name and arguments. deb-systemd-helper's was-enabled answers from
// $WAS_ENABLED, its debian-installed from $DEBIAN_INSTALLED.
var fakeTools = map[string]string{
	"deb-systemd-helper": `echo "deb-systemd-helper $*" >>"$LOG"
if [ "$1 $2" = "--quiet was-enabled" ]; then [ "$WAS_ENABLED" = 1 ]; exit; fi
if [ "$1" = "debian-installed" ]; then [ "$DEBIAN_INSTALLED" = 1 ]; exit; fi`,
	"deb-systemd-invoke": `echo "deb-systemd-invoke $*" >>"$LOG"`,
	"systemctl":          `echo "systemctl $*" >>"$LOG"`,
	"systemd-tmpfiles":   `echo "systemd-tmpfiles $*" >>"$LOG"`,
	"systemd-sysusers":   `echo "systemd-sysusers $*" >>"$LOG"`,
	"edgeheal":           `echo "edgeheal $*" >>"$LOG"`,
}

type scriptRun struct {
	dir             string // under packaging/; "" is scripts, the agent's
	script          string
	args            []string
	systemdRunning  bool // /run/systemd/system exists
	wasEnabled      bool
	debianInstalled bool // deb-systemd-helper has a state for the unit
}

// runScript runs a maintainer script against the fakes, in a private mount
// namespace whose /run is an empty tmpfs (with /run/systemd/system when
// systemd should look running), with DPKG_ROOT set to root. It returns the
// logged calls.
func runScript(t *testing.T, root string, r scriptRun) []string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range fakeTools {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "log")
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	scripts := r.dir
	if scripts == "" {
		scripts = "scripts"
	}
	script := filepath.Join(repo, "packaging", scripts, r.script)
	shell := `mount -t tmpfs edgeheal-pkgtest /run && if [ "$RUNNING" = 1 ]; then mkdir -p /run/systemd/system; fi && exec sh "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", shell, "sh", script}, r.args...)...)
	cmd.Env = []string{"PATH=" + bin + ":/usr/sbin:/usr/bin:/sbin:/bin", "LOG=" + log, "DPKG_ROOT=" + root,
		"RUNNING=" + flag(r.systemdRunning), "WAS_ENABLED=" + flag(r.wasEnabled), "DEBIAN_INSTALLED=" + flag(r.debianInstalled)}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", r.script, r.args, err, out)
	}
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// A scriptCase is one run of a maintainer script and the calls it must make.
type scriptCase struct {
	name string
	run  scriptRun
	want []string
}

// runScripts runs each case in a fresh DPKG_ROOT and compares its calls.
func runScripts(t *testing.T, cases []scriptCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got := runScript(t, t.TempDir(), tt.run)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	testsupport.RequireRoot(t, "a private mount namespace over /run")
}

func TestLabDebMaintainerScriptsInstallUpgradeRemovePurge(t *testing.T) {
	needRoot(t)
	runScripts(t, []scriptCase{
		{
			name: "a first install enables and starts the service",
			run:  scriptRun{script: "deb-postinst", args: []string{"configure", ""}, systemdRunning: true, wasEnabled: true},
			want: []string{
				"systemd-sysusers edgeheal.conf",
				"systemd-tmpfiles --create edgeheal.conf",
				"deb-systemd-helper unmask edgeheal.service",
				"deb-systemd-helper --quiet was-enabled edgeheal.service",
				"deb-systemd-helper enable edgeheal.service",
				"systemctl --system daemon-reload",
				"deb-systemd-invoke start edgeheal.service",
			},
		},
		{
			name: "an upgrade restarts the service on the new binary",
			run:  scriptRun{script: "deb-postinst", args: []string{"configure", "0.1.0-1"}, systemdRunning: true, wasEnabled: true},
			want: []string{
				"systemd-sysusers edgeheal.conf",
				"systemd-tmpfiles --create edgeheal.conf",
				"deb-systemd-helper unmask edgeheal.service",
				"deb-systemd-helper --quiet was-enabled edgeheal.service",
				"deb-systemd-helper enable edgeheal.service",
				"systemctl --system daemon-reload",
				"deb-systemd-invoke restart edgeheal.service",
			},
		},
		{
			name: "an upgrade keeps a unit the admin disabled disabled",
			run:  scriptRun{script: "deb-postinst", args: []string{"configure", "0.1.0-1"}, systemdRunning: true, wasEnabled: false},
			want: []string{
				"systemd-sysusers edgeheal.conf",
				"systemd-tmpfiles --create edgeheal.conf",
				"deb-systemd-helper unmask edgeheal.service",
				"deb-systemd-helper --quiet was-enabled edgeheal.service",
				"deb-systemd-helper update-state edgeheal.service",
				"systemctl --system daemon-reload",
				"deb-systemd-invoke restart edgeheal.service",
			},
		},
		{
			name: "an install without a running systemd (an image build) enables but starts nothing",
			run:  scriptRun{script: "deb-postinst", args: []string{"configure", ""}, systemdRunning: false, wasEnabled: true},
			want: []string{
				"systemd-sysusers edgeheal.conf",
				"systemd-tmpfiles --create edgeheal.conf",
				"deb-systemd-helper unmask edgeheal.service",
				"deb-systemd-helper --quiet was-enabled edgeheal.service",
				"deb-systemd-helper enable edgeheal.service",
			},
		},
		{
			name: "prerm of an upgrade leaves the service running",
			run:  scriptRun{script: "deb-prerm", args: []string{"upgrade", "0.2.0-1"}, systemdRunning: true},
			want: nil,
		},
		{
			name: "prerm of a removal stops the service, then removes what outlives it",
			run:  scriptRun{script: "deb-prerm", args: []string{"remove"}, systemdRunning: true},
			want: []string{"deb-systemd-invoke stop edgeheal.service", "edgeheal cleanup"},
		},
		{
			name: "prerm of a removal without a running systemd still removes what outlives it",
			run:  scriptRun{script: "deb-prerm", args: []string{"remove"}, systemdRunning: false},
			want: []string{"edgeheal cleanup"},
		},
		{
			name: "postrm of a removal masks the unit's leftover enablement",
			run:  scriptRun{script: "deb-postrm", args: []string{"remove"}, systemdRunning: true},
			want: []string{"systemctl --system daemon-reload", "deb-systemd-helper mask edgeheal.service"},
		},
		{
			name: "postrm of a purge forgets the enablement",
			run:  scriptRun{script: "deb-postrm", args: []string{"purge"}, systemdRunning: false},
			want: []string{"deb-systemd-helper purge edgeheal.service", "deb-systemd-helper unmask edgeheal.service"},
		},
	})
}

func TestLabDebPurgeRemovesStateButKeepsFleetFiles(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	for _, p := range []string{"var/lib/edgeheal/outbox/0001.json", "var/lib/edgeheal/last-good-config.yaml", "etc/edgeheal/config.d/50-fleet.yaml"} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runScript(t, root, scriptRun{script: "deb-postrm", args: []string{"remove"}})
	if _, err := os.Stat(filepath.Join(root, "var/lib/edgeheal/last-good-config.yaml")); err != nil {
		t.Errorf("remove (not purge) deleted the state: %v", err)
	}
	runScript(t, root, scriptRun{script: "deb-postrm", args: []string{"purge"}})
	if _, err := os.Stat(filepath.Join(root, "var/lib/edgeheal")); !os.IsNotExist(err) {
		t.Errorf("purge left /var/lib/edgeheal (err %v)", err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/edgeheal/config.d/50-fleet.yaml")); err != nil {
		t.Errorf("purge removed a file the package does not own: %v", err)
	}
	// With config.d empty, purge removes /etc/edgeheal too.
	os.Remove(filepath.Join(root, "etc/edgeheal/config.d/50-fleet.yaml"))
	runScript(t, root, scriptRun{script: "deb-postrm", args: []string{"purge"}})
	if _, err := os.Stat(filepath.Join(root, "etc/edgeheal")); !os.IsNotExist(err) {
		t.Errorf("purge left an empty /etc/edgeheal (err %v)", err)
	}
}

func TestLabRpmScriptletsInstallUpgradeErase(t *testing.T) {
	needRoot(t)
	// rpm runs, on an upgrade: new %post (2), then old %preun (1) and
	// old %postun (1); on an erase: %preun (0), %postun (0).
	runScripts(t, []scriptCase{
		{
			name: "a first install presets (enables) and starts the service",
			run:  scriptRun{script: "rpm-post", args: []string{"1"}, systemdRunning: true},
			want: []string{
				"systemd-sysusers edgeheal.conf",
				"systemd-tmpfiles --create edgeheal.conf",
				"systemctl --no-reload preset edgeheal.service",
				"systemctl daemon-reload",
				"systemctl start edgeheal.service",
			},
		},
		{
			name: "an install without a running systemd presets only",
			run:  scriptRun{script: "rpm-post", args: []string{"1"}},
			want: []string{"systemd-sysusers edgeheal.conf", "systemd-tmpfiles --create edgeheal.conf", "systemctl --no-reload preset edgeheal.service"},
		},
		{
			name: "%post of an upgrade keeps the admin's enablement",
			run:  scriptRun{script: "rpm-post", args: []string{"2"}, systemdRunning: true},
			want: []string{"systemd-sysusers edgeheal.conf", "systemd-tmpfiles --create edgeheal.conf"},
		},
		{
			name: "%preun of an upgrade leaves the service alone",
			run:  scriptRun{script: "rpm-preun", args: []string{"1"}, systemdRunning: true},
			want: nil,
		},
		{
			name: "%postun of an upgrade try-restarts the service",
			run:  scriptRun{script: "rpm-postun", args: []string{"1"}, systemdRunning: true},
			want: []string{"systemctl daemon-reload", "systemctl try-restart edgeheal.service"},
		},
		{
			name: "an erase disables and stops the service, then removes what outlives it",
			run:  scriptRun{script: "rpm-preun", args: []string{"0"}, systemdRunning: true},
			want: []string{"systemctl --no-reload disable --now edgeheal.service", "edgeheal cleanup"},
		},
		{
			name: "%postun of an erase only reloads the units",
			run:  scriptRun{script: "rpm-postun", args: []string{"0"}, systemdRunning: true},
			want: []string{"systemctl daemon-reload"},
		},
	})
}

// The packages carry exactly the scripts tested above.
func TestPackagesCarryTheTestedScripts(t *testing.T) {
	built(t)
	checkCarriesScripts(t, "edgeheal", "scripts")
}

// checkCarriesScripts checks that the amd64 .deb and .rpm of the package
// called name carry the maintainer scripts of packaging/<dir>, unchanged.
func checkCarriesScripts(t *testing.T, name, dir string) {
	t.Helper()
	ctrl := t.TempDir()
	output(t, "dpkg-deb", "--control", namedDebPath(name, "amd64"), ctrl)
	for pkg, src := range map[string]string{"postinst": "deb-postinst", "prerm": "deb-prerm", "postrm": "deb-postrm"} {
		got, _ := os.ReadFile(filepath.Join(ctrl, pkg))
		want, _ := os.ReadFile(filepath.Join(repo, "packaging", dir, src))
		if string(got) != string(want) {
			t.Errorf("the .deb's %s is not packaging/%s/%s", pkg, dir, src)
		}
		if out, err := exec.Command("sh", "-n", filepath.Join(ctrl, pkg)).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", pkg, err, out)
		}
	}
	scripts := output(t, "rpm", "-qp", "--scripts", namedRpmPath(name, "amd64"))
	for _, src := range []string{"rpm-post", "rpm-preun", "rpm-postun"} {
		want, _ := os.ReadFile(filepath.Join(repo, "packaging", dir, src))
		if !strings.Contains(scripts, strings.TrimSpace(string(want))) {
			t.Errorf("the .rpm's scriptlets do not include packaging/%s/%s", dir, src)
		}
	}
}
