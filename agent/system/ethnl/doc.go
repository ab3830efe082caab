// Package ethnl reads and changes the features of network devices
// (`ethtool -k`/`-K`) through the kernel's ethtool generic netlink family
// (Linux 5.6 and later), which is what ethtool(8) itself uses. It owns
// those two requests and nothing else of ethtool. It never lays out a
// kernel struct (the messages are netlink attributes, encoded by
// github.com/mdlayher/netlink), never decides, retries or logs, and never
// moves its socket between namespaces: Dial makes it in the calling
// thread's network namespace, and it acts on that namespace's devices for
// good (the caller creates it inside the namespace, as agent/system does).
//
// Errors stay in this package's terms: a missing device matches
// os.ErrNotExist, a feature name the kernel does not know
// ErrUnknownFeature, a kernel without the family errors.ErrUnsupported.
//
// # Compact bitsets and one name table per device
//
// A FEATURES_GET reply can carry its four bitsets verbose (each bit with
// its name; the HW set comes with a mask of every feature, so every name
// is in every reply) or compact (bits only), and then the names come from
// an ETHTOOL_MSG_STRSET_GET of ETH_SS_FEATURES. Features asks for compact
// bitsets and keeps each device's name table, read once and read again
// when the name belongs to a new device (its ifindex changed: a re-plugged
// modem). Change needs no table: it names the features to change.
//
// Measured on a veth in an anonymous namespace (2-core VM, kernel 6.18,
// BenchmarkLabEthnlFeatures and BenchmarkLabEthnlFix, 2026-12-03):
//
//	one read, compact, the table kept         26 µs   10.7 kB    78 allocs
//	one read, compact, a new device (+ table) 95 µs   37.8 kB   459 allocs
//	one read, verbose                        120 µs   59.4 kB   770 allocs
//	a fix: read (new device), change, read back:
//	  compact                               0.22 ms   55.4 kB   596 allocs
//	  verbose                               0.37 ms  123.6 kB  1557 allocs
//
// A verbose reply is 4.4 kB (more than the page the receive starts with,
// so it is peeked at twice) with about 130 names to decode into strings;
// a compact one is 140 bytes. Compact is faster even for a device never
// seen before, and its extra code is one small cache, so compact it is.
// (The verbose decoder is kept in verbose_test.go, for the benchmark and
// for a test that both say the same.)
//
// Kernel facts this relies on (kernel 6.18, 2026-12-03): the name table of
// ETH_SS_FEATURES is the kernel's own list, the same for every device, with
// empty names for unused bits (skipped); a WANTED bitset without NOMASK
// changes only the bits it names; a fixed feature's change is acknowledged
// and not applied; an unknown name is EOPNOTSUPP, "bit name not found".
package ethnl
