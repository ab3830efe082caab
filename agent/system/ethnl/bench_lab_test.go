package ethnl

import "testing"

// The measurements behind the package doc's choice of compact bitsets and
// a name table per device over verbose bitsets. Root, a veth in an
// anonymous namespace:
//
//	sudo env PATH=$PATH go test -run '^$' -bench LabEthnl -benchmem ./agent/system/ethnl/
func BenchmarkLabEthnlFeatures(b *testing.B) {
	c, ns := labConn(b)
	addVeth(b, ns, "nl0")
	read := map[string]func() (map[string]State, error){
		// What the package does once it has read nl0's names.
		"compact": func() (map[string]State, error) { return c.Features("nl0") },
		// A device seen for the first time (a re-plugged modem): the
		// features and then the name table.
		"compact-new-device": func() (map[string]State, error) {
			c.forget("nl0")
			return c.Features("nl0")
		},
		// Names in every reply, nothing kept.
		"verbose": func() (map[string]State, error) { return c.verboseFeatures("nl0") },
	}
	for _, name := range []string{"compact", "compact-new-device", "verbose"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := read[name](); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLabEthnlFix is the offload guard's fix on a re-plugged link:
// read (a device new to the socket), change tx-checksum-ip-generic to the
// opposite of what was read, read back.
func BenchmarkLabEthnlFix(b *testing.B) {
	c, ns := labConn(b)
	addVeth(b, ns, "nl0")
	for _, name := range []string{"compact", "verbose"} {
		read := c.Features
		if name == "verbose" {
			read = c.verboseFeatures
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.forget("nl0")
				fs, err := read("nl0")
				if err != nil {
					b.Fatal(err)
				}
				want := !fs["tx-checksum-ip-generic"].Active
				if err := c.Change("nl0", map[string]bool{"tx-checksum-ip-generic": want}); err != nil {
					b.Fatal(err)
				}
				after, err := read("nl0")
				if err != nil {
					b.Fatal(err)
				}
				if after["tx-checksum-ip-generic"].Active != want {
					b.Fatalf("tx-checksum-ip-generic not %v after the change", want)
				}
			}
		})
	}
}
