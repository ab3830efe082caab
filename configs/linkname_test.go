package configs

import (
	"strings"
	"testing"
)

// Names that can never be link names are refused, for uplinks and tunnels
// alike: "eth0;rm -rf /" and "../../etc" were accepted as uplinks while a
// tunnel name with '/' was refused. A glob is held to the same rules, and
// to the shortest name it matches.
func TestLinkNamesThatCanNeverBeAreRefused(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		says string // "" : valid
	}{
		{`uplinks: [{name: "*"}]`, ""},
		{`uplinks: [{name: "wwan?"}]`, ""},
		{`uplinks: [{name: "enp0s31f6"}]`, ""},
		{`uplinks: [{name: "eth0;rm -rf /"}]`, `uplinks[0].name: "eth0;rm -rf /" is not a valid link name: it holds ' '`},
		{`uplinks: [{name: "../../etc"}]`, `uplinks[0].name: "../../etc" is not a valid link name: it holds '/'`},
		{`uplinks: [{name: ".."}]`, `uplinks[0].name: ".." is not a valid link name`},
		{`uplinks: [{name: "eth0:1"}]`, `is not a valid link name: it holds ':'`},
		{"uplinks: [{name: \"eth\\u001b0\"}]", `is not a valid link name: it holds '\x1b'`},
		{`uplinks: [{name: "a-very-long-name0"}]`, `longer than one can be`},
		{`uplinks: [{name: "a-very-long-prefix*"}]`, `longer than one can be`},
		{`uplinks: [{name: "a-long-prefix*"}]`, ""},
		{`tunnels: [{interface: "wg/0", peers: all}]`, `tunnels[0].interface: "wg/0" is not a valid link name: it holds '/'`},
		{`tunnels: [{interface: "wg 0", peers: all}]`, `is not a valid link name: it holds ' '`},
	} {
		_, err := Parse("f.yaml", []byte("version: 1\nnode: {name: n}\n"+tc.yaml+"\n"))
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.yaml, err)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.says)
		}
	}
}
