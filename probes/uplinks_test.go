package probes

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeLinks is a hand-written LinkLister.
type fakeLinks struct {
	links        []Link
	defaultRoute []int
	routeErr     error
	calls        []string
}

func (f *fakeLinks) Links() ([]Link, error) {
	f.calls = append(f.calls, "Links")
	return f.links, nil
}

func (f *fakeLinks) DefaultRouteLinks() ([]int, error) {
	f.calls = append(f.calls, "DefaultRouteLinks")
	return f.defaultRoute, f.routeErr
}

func TestSelectUplinks(t *testing.T) {
	links := []Link{
		{Name: "lo", Index: 1, Up: true},
		{Name: "eth0", Index: 2, Up: true},
		{Name: "wwan0", Index: 3, Up: true},
		{Name: "wwan1", Index: 4},
		{Name: "usb0", Index: 5, Up: true},
		{Name: "wg0", Index: 6, Up: true},
	}
	tests := []struct {
		name      string
		selectors []string
		dr        []int
		want      []SelectedLink
		wantCalls []string
	}{
		{
			name:      "an exact name selects that link only",
			selectors: []string{"eth0"},
			want:      []SelectedLink{{Link: links[1], Selectors: []int{0}}},
			wantCalls: []string{"Links"},
		},
		{
			name:      "a glob selects every matching link, sorted by name",
			selectors: []string{"wwan*"},
			want: []SelectedLink{
				{Link: links[2], Selectors: []int{0}},
				{Link: links[3], Selectors: []int{0}},
			},
			wantCalls: []string{"Links"},
		},
		{
			name:      "default-route selects the links of the default routes",
			selectors: []string{"default-route"},
			dr:        []int{3, 5, 3},
			want: []SelectedLink{
				{Link: links[4], Selectors: []int{0}},
				{Link: links[2], Selectors: []int{0}},
			},
			wantCalls: []string{"Links", "DefaultRouteLinks"},
		},
		{
			name:      "a link chosen by two selectors appears once with both",
			selectors: []string{"wwan0", "default-route", "usb*"},
			dr:        []int{3},
			want: []SelectedLink{
				{Link: links[4], Selectors: []int{2}},
				{Link: links[2], Selectors: []int{0, 1}},
			},
			wantCalls: []string{"Links", "DefaultRouteLinks"},
		},
		{
			name:      "a selector that matches nothing selects nothing",
			selectors: []string{"ppp*"},
			want:      nil,
			wantCalls: []string{"Links"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLinks{links: links, defaultRoute: tt.dr}
			got, err := SelectUplinks(f, tt.selectors)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, f.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectUplinksRouteErrorIsAnError(t *testing.T) {
	f := &fakeLinks{links: []Link{{Name: "eth0", Index: 2}}, routeErr: errors.New("netlink: boom")}
	if _, err := SelectUplinks(f, []string{"default-route"}); err == nil {
		t.Error("no error when the default routes could not be read")
	}
}

func TestValidUplinkSelector(t *testing.T) {
	for sel, ok := range map[string]bool{
		"eth0": true, "wwan*": true, "eth[01]": true, "default-route": true,
		"": false, "eth[": false,
	} {
		if err := ValidUplinkSelector(sel); (err == nil) != ok {
			t.Errorf("ValidUplinkSelector(%q) = %v, want ok: %v", sel, err, ok)
		}
	}
}

func TestExpandFeatureName(t *testing.T) {
	fs := []Feature{
		{Name: "rx-gro"}, {Name: "tx-checksum-ip-generic", On: true},
		{Name: "tx-checksum-ipv4", Fixed: true}, {Name: "tx-tcp-segmentation", On: true},
	}
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "a kernel name is itself", in: "rx-gro", want: []string{"rx-gro"}},
		{name: "tx-checksumming is every tx-checksum feature", in: "tx-checksumming",
			want: []string{"tx-checksum-ip-generic", "tx-checksum-ipv4"}},
		{name: "tso is the tcp segmentation features", in: "tso", want: []string{"tx-tcp-segmentation"}},
		{name: "an unknown name is an error", in: "checksum", wantErr: true},
		{name: "a group without members here is an error", in: "lro", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExpandFeatureName(tt.in, fs)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
