package netfix_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

func TestEnsureOffload(t *testing.T) {
	on := netfix.FeatureState{Active: true, Requested: true, Changeable: true}
	off := netfix.FeatureState{Changeable: true}
	fixedOn := netfix.FeatureState{Active: true, Requested: true}
	fixedOff := netfix.FeatureState{}

	tests := []struct {
		name      string
		features  map[string]netfix.FeatureState
		extra     map[string]string
		dryRun    bool
		ignore    bool  // the driver accepts the change and applies nothing
		changeErr error // the driver refuses the change
		want      netfix.Result
		wantCalls []string
		wantErr   []error  // each must match errors.Is
		errHas    []string // each must be in the message
		wantAfter map[string]bool
	}{
		{
			name:     "tx checksum features that are on are turned off and read back",
			features: netfixtest.Veth(),
			want: netfix.Result{Action: "offload-off", Target: "eth0", Changed: true, Changes: []string{
				"tx-checksum-ip-generic: on -> off",
				"tx-checksum-sctp: on -> off",
			}},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off tx-checksum-sctp=off",
				"FeaturesWithState eth0",
			},
			wantAfter: map[string]bool{"tx-checksum-ip-generic": false, "tx-checksum-sctp": false},
		},
		{
			name: "features already off are not changed",
			features: map[string]netfix.FeatureState{
				"tx-checksum-ip-generic": off, "tx-checksum-ipv4": fixedOff, "rx-gro": on,
			},
			want:      netfix.Result{Action: "offload-off", Target: "eth0"},
			wantCalls: []string{"FeaturesWithState eth0"},
		},
		{
			name: "a fixed feature that is on is reported and not an error",
			features: map[string]netfix.FeatureState{
				"tx-checksum-ipv4": fixedOn, "tx-checksum-ip-generic": on, "tx-checksum-ipv6": fixedOff,
			},
			want: netfix.Result{Action: "offload-off", Target: "eth0", Changed: true,
				Changes: []string{"tx-checksum-ip-generic: on -> off"},
				Fixed:   []string{"tx-checksum-ipv4: on [fixed]"},
			},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off",
				"FeaturesWithState eth0",
			},
		},
		{
			name:     "only fixed features need changing: nothing is asked of the driver",
			features: map[string]netfix.FeatureState{"tx-checksum-ipv4": fixedOn},
			want: netfix.Result{Action: "offload-off", Target: "eth0",
				Fixed: []string{"tx-checksum-ipv4: on [fixed]"}},
			wantCalls: []string{"FeaturesWithState eth0"},
		},
		{
			name:     "ethtool group names are expanded to the kernel names the link has",
			features: netfixtest.Veth(),
			extra:    map[string]string{"tso": "off", "generic-receive-offload": "on", "sg": "off"},
			want: netfix.Result{Action: "offload-off", Target: "eth0", Changed: true, Changes: []string{
				"rx-gro: off -> on",
				"tx-checksum-ip-generic: on -> off",
				"tx-checksum-sctp: on -> off",
				"tx-scatter-gather: on -> off",
				"tx-scatter-gather-fraglist: on -> off",
				"tx-tcp-ecn-segmentation: on -> off",
				"tx-tcp-segmentation: on -> off",
				"tx-tcp6-segmentation: on -> off",
			}},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 rx-gro=on tx-checksum-ip-generic=off tx-checksum-sctp=off tx-scatter-gather=off " +
					"tx-scatter-gather-fraglist=off tx-tcp-ecn-segmentation=off tx-tcp-segmentation=off tx-tcp6-segmentation=off",
				"FeaturesWithState eth0",
			},
		},
		{
			name:     "tx-checksumming as an extra feature is the same as the guard",
			features: netfixtest.Veth(),
			extra:    map[string]string{"tx-checksumming": "off"},
			want: netfix.Result{Action: "offload-off", Target: "eth0", Changed: true, Changes: []string{
				"tx-checksum-ip-generic: on -> off",
				"tx-checksum-sctp: on -> off",
			}},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off tx-checksum-sctp=off",
				"FeaturesWithState eth0",
			},
		},
		{
			name:     "an unknown feature name is a config error listing the link's names, and tx checksum is still turned off",
			features: map[string]netfix.FeatureState{"tx-checksum-ip-generic": on, "rx-gro": off},
			extra:    map[string]string{"tx-checksum-offload": "off"},
			want: netfix.Result{Action: "offload-off", Target: "eth0", Changed: true,
				Changes: []string{"tx-checksum-ip-generic: on -> off"}},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off",
				"FeaturesWithState eth0",
			},
			wantErr: []error{netfix.ErrUnknownFeature},
			errHas:  []string{`"tx-checksum-offload"`, "the link has: rx-gro, tx-checksum-ip-generic"},
		},
		{
			name:     "a value other than on or off is a config error",
			features: map[string]netfix.FeatureState{"rx-gro": off},
			extra:    map[string]string{"gro": "yes"},
			want:     netfix.Result{Action: "offload-off", Target: "eth0"},
			wantCalls: []string{
				"FeaturesWithState eth0",
			},
			wantErr: []error{netfix.ErrUnknownFeature},
			errHas:  []string{`value "yes" is not on or off`},
		},
		{
			name:     "an extra feature that turns tx checksum back on conflicts with the guard",
			features: map[string]netfix.FeatureState{"tx-checksum-ip-generic": on},
			extra:    map[string]string{"tx": "on"},
			want: netfix.Result{Action: "offload-off", Target: "eth0", Changed: true,
				Changes: []string{"tx-checksum-ip-generic: on -> off"}},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off",
				"FeaturesWithState eth0",
			},
			wantErr: []error{netfix.ErrConflict},
		},
		{
			name:      "a missing link is an error matching os.ErrNotExist",
			features:  nil,
			want:      netfix.Result{Action: "offload-off", Target: "eth0"},
			wantCalls: []string{"FeaturesWithState eth0"},
			wantErr:   []error{os.ErrNotExist},
		},
		{
			name:     "the change is accepted but the read-back still shows on: an error that says so",
			features: map[string]netfix.FeatureState{"tx-checksum-ip-generic": on, "tx-checksum-ipv4": fixedOff},
			ignore:   true,
			want:     netfix.Result{Action: "offload-off", Target: "eth0"},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off",
				"FeaturesWithState eth0",
			},
			wantErr: []error{netfix.ErrNotApplied},
			errHas:  []string{"tx-checksum-ip-generic still on"},
		},
		{
			name:      "a change the driver refuses is an error that lists what was attempted",
			features:  map[string]netfix.FeatureState{"tx-checksum-ip-generic": on},
			changeErr: syscall.EOPNOTSUPP,
			want: netfix.Result{Action: "offload-off", Target: "eth0",
				Changes: []string{"tx-checksum-ip-generic: on -> off"}},
			wantCalls: []string{
				"FeaturesWithState eth0",
				"Change eth0 tx-checksum-ip-generic=off",
			},
			wantErr: []error{syscall.EOPNOTSUPP},
			errHas:  []string{"changing features of eth0"},
		},
		{
			name:     "dry run reports what would change and changes nothing",
			features: netfixtest.Veth(),
			dryRun:   true,
			want: netfix.Result{Action: "offload-off", Target: "eth0", DryRun: true, Changes: []string{
				"tx-checksum-ip-generic: on -> off",
				"tx-checksum-sctp: on -> off",
			}},
			wantCalls: []string{"FeaturesWithState eth0"},
			wantAfter: map[string]bool{"tx-checksum-ip-generic": true, "tx-checksum-sctp": true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nic := netfixtest.NewNIC()
			if tt.features != nil {
				nic.SetLink("eth0", tt.features)
			}
			nic.IgnoreChanges("eth0", tt.ignore)
			nic.FailChangeWith("eth0", tt.changeErr)

			got, _, err := netfix.EnsureOffload(context.Background(), nic, "eth0", netfix.OffloadWant{TxChecksumOff: true, Features: tt.extra}, tt.dryRun)

			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, nic.Calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Errorf("unexpected error: %v", err)
			}
			for _, target := range tt.wantErr {
				if !errors.Is(err, target) {
					t.Errorf("error %v does not match %v", err, target)
				}
			}
			for _, s := range tt.errHas {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("error %v does not say %q", err, s)
				}
			}
			after := nic.Features("eth0")
			for f, want := range tt.wantAfter {
				if after[f].Active != want {
					t.Errorf("%s active = %v after the action, want %v", f, after[f].Active, want)
				}
			}
		})
	}
}

func TestEnsureOffloadTwiceChangesNothingTheSecondTime(t *testing.T) {
	nic := netfixtest.NewNIC()
	nic.SetLink("wwan0", netfixtest.Veth())
	ctx := context.Background()
	if _, _, err := netfix.EnsureOffload(ctx, nic, "wwan0", netfix.OffloadWant{TxChecksumOff: true}, false); err != nil {
		t.Fatal(err)
	}
	nic.ResetCalls()
	got, _, err := netfix.EnsureOffload(ctx, nic, "wwan0", netfix.OffloadWant{TxChecksumOff: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := netfix.Result{Action: "offload-off", Target: "wwan0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("second result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"FeaturesWithState wwan0"}, nic.Calls()); diff != "" {
		t.Errorf("second calls (-want +got):\n%s", diff)
	}
}

func TestEnsureOffloadWithoutTxChecksumLeavesItAlone(t *testing.T) {
	nic := netfixtest.NewNIC()
	nic.SetLink("eth0", netfixtest.Veth())
	got, _, err := netfix.EnsureOffload(context.Background(), nic, "eth0", netfix.OffloadWant{Features: map[string]string{"gro": "on"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := netfix.Result{Action: "offload-off", Target: "eth0", Changed: true, Changes: []string{"rx-gro: off -> on"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func TestEnsureOffloadStopsOnCancelledContext(t *testing.T) {
	nic := netfixtest.NewNIC()
	nic.SetLink("eth0", netfixtest.Veth())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := netfix.EnsureOffload(ctx, nic, "eth0", netfix.OffloadWant{TxChecksumOff: true}, false)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
	if calls := nic.Calls(); len(calls) != 0 {
		t.Errorf("calls = %q, want none", calls)
	}
}

func TestExpandFeature(t *testing.T) {
	have := netfixtest.Veth()
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "a kernel name is itself", in: "rx-gro", want: []string{"rx-gro"}},
		{name: "tx is every tx-checksum feature the link lists", in: "tx", want: []string{
			"tx-checksum-fcoe-crc", "tx-checksum-ip-generic", "tx-checksum-ipv4", "tx-checksum-ipv6", "tx-checksum-sctp"}},
		{name: "the long group name works too", in: "tcp-segmentation-offload", want: []string{
			"tx-tcp-ecn-segmentation", "tx-tcp-segmentation", "tx-tcp6-segmentation"}},
		{name: "rx is rx-checksum", in: "rx", want: []string{"rx-checksum"}},
		{name: "a group with no member on this link is an error", in: "ufo", wantErr: true},
		{name: "an unknown name is an error", in: "tx-csum", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := netfix.ExpandFeature(tt.in, have)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, netfix.ErrUnknownFeature) {
				t.Errorf("error %v does not match ErrUnknownFeature", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanOffloadListsEveryGuardedFeatureWithItsWantedState(t *testing.T) {
	have := netfixtest.Veth()
	p := netfix.PlanOffload(have, netfix.OffloadWant{TxChecksumOff: true, Features: map[string]string{"gro": "on", "tx-checksum-ipv6": "on"}})
	var got []string
	for _, f := range p.Guarded {
		got = append(got, fmt.Sprintf("%s want %v ok %v", f.Name, f.Want, f.OK()))
	}
	want := []string{
		"rx-gro want true ok false",
		"tx-checksum-fcoe-crc want false ok true",
		"tx-checksum-ip-generic want false ok false",
		"tx-checksum-ipv4 want false ok true",
		"tx-checksum-ipv6 want false ok true",
		"tx-checksum-sctp want false ok false",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("guarded features (-want +got):\n%s", diff)
	}
	if !errors.Is(p.Err, netfix.ErrConflict) || !strings.Contains(p.Err.Error(), `tx-checksum-ipv6: on (from "tx-checksum-ipv6") but tx_checksum is off`) {
		t.Errorf("Err = %v, want the conflict named", p.Err)
	}
	if diff := cmp.Diff([]string{"rx-gro: off -> on", "tx-checksum-ip-generic: on -> off", "tx-checksum-sctp: on -> off"}, p.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}
