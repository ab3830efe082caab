package ethnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/genetlink/genltest"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The Conn against a fake kernel that answers with the captured replies
// (fixtures_test.go) and logs what it was asked.

const fakeFamily = 21

// fakeKernel serves the ethtool family. It has one device, up0, with the
// captured features, at index ifindex; set fails Change requests.
type fakeKernel struct {
	ifindex uint32
	set     error
	log     []string // "FEATURES_GET up0", "STRSET_GET #3", "FEATURES_SET up0"
}

func (k *fakeKernel) dial(tb testing.TB) *Conn {
	tb.Helper()
	gc := genltest.Dial(genltest.ServeFamily(genetlink.Family{ID: fakeFamily, Name: unix.ETHTOOL_GENL_NAME, Version: 1}, k.serve(tb)))
	c, err := newConn(gc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// requestedDevice returns the name or index the request's header names.
func requestedDevice(tb testing.TB, body []byte) (string, uint32, uint32) {
	tb.Helper()
	ad, err := netlink.NewAttributeDecoder(body)
	if err != nil {
		tb.Fatal(err)
	}
	var name string
	var index, flags uint32
	for ad.Next() {
		if ad.Type() != unix.ETHTOOL_A_FEATURES_HEADER { // STRSET_HEADER is 1 too
			continue
		}
		ad.Nested(func(ad *netlink.AttributeDecoder) error {
			for ad.Next() {
				switch ad.Type() {
				case unix.ETHTOOL_A_HEADER_DEV_NAME:
					name = ad.String()
				case unix.ETHTOOL_A_HEADER_DEV_INDEX:
					index = ad.Uint32()
				case unix.ETHTOOL_A_HEADER_FLAGS:
					flags = ad.Uint32()
				}
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		tb.Fatal(err)
	}
	return name, index, flags
}

var noDevice = &netlink.OpError{Op: "receive", Err: unix.ENODEV, Message: "no device matches name", Offset: 24}

func (k *fakeKernel) serve(tb testing.TB) genltest.Func {
	return func(greq genetlink.Message, nreq netlink.Message) ([]genetlink.Message, error) {
		if nreq.Header.Type != fakeFamily {
			return nil, fmt.Errorf("a request to family %d", nreq.Header.Type)
		}
		name, index, flags := requestedDevice(tb, greq.Data)
		reply := func(cmd uint8, b []byte) ([]genetlink.Message, error) {
			return []genetlink.Message{{Header: genetlink.Header{Command: cmd, Version: 1}, Data: b}}, nil
		}
		switch greq.Header.Command {
		case unix.ETHTOOL_MSG_FEATURES_GET:
			k.log = append(k.log, "FEATURES_GET "+name)
			if name != "up0" {
				return nil, noDevice
			}
			if flags != unix.ETHTOOL_FLAG_COMPACT_BITSETS || nreq.Header.Flags != netlink.Request {
				return nil, fmt.Errorf("features read with header flags %d, netlink flags %v", flags, nreq.Header.Flags)
			}
			b := readHex(tb, "features-compact.hex")
			// The captured header: HEADER (4 bytes), DEV_INDEX (4), index.
			binary.NativeEndian.PutUint32(b[8:], k.ifindex)
			return reply(unix.ETHTOOL_MSG_FEATURES_GET_REPLY, b)
		case unix.ETHTOOL_MSG_STRSET_GET:
			k.log = append(k.log, fmt.Sprintf("STRSET_GET #%d", index))
			if index != k.ifindex {
				return nil, noDevice
			}
			return reply(unix.ETHTOOL_MSG_STRSET_GET_REPLY, readHex(tb, "strset-features.hex"))
		case unix.ETHTOOL_MSG_FEATURES_SET:
			k.log = append(k.log, "FEATURES_SET "+name)
			if nreq.Header.Flags != netlink.Request|netlink.Acknowledge || flags != unix.ETHTOOL_FLAG_OMIT_REPLY {
				return nil, fmt.Errorf("a change with header flags %d, netlink flags %v", flags, nreq.Header.Flags)
			}
			if name != "up0" {
				return nil, noDevice
			}
			if k.set != nil {
				return nil, k.set
			}
			return nil, genltest.Error(0) // the ack: an error message of code 0
		}
		return nil, fmt.Errorf("command %d", greq.Header.Command)
	}
}

func TestFeaturesReadTheNameTableOncePerDevice(t *testing.T) {
	k := &fakeKernel{ifindex: 3}
	c := k.dial(t)
	first, err := c.Features("up0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(capturedFeatures(t), first); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	if _, err := c.Features("up0"); err != nil {
		t.Fatal(err)
	}
	k.ifindex = 9 // up0 deleted and created again
	if _, err := c.Features("up0"); err != nil {
		t.Fatal(err)
	}
	if err := c.Change("up0", map[string]bool{"rx-gro": true}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"FEATURES_GET up0", "STRSET_GET #3", // first read: the names too
		"FEATURES_GET up0",                  // same device: the names it has
		"FEATURES_GET up0", "STRSET_GET #9", // a new device by the same name
		"FEATURES_SET up0", // a change needs no names
	}
	if diff := cmp.Diff(want, k.log); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestErrorsMatchTheirSentinelsAndKeepNetlinkInside(t *testing.T) {
	k := &fakeKernel{ifindex: 3}
	c := k.dial(t)
	_, ferr := c.Features("nosuch0")
	cerr := c.Change("nosuch0", map[string]bool{"rx-gro": true})
	for _, tt := range []struct {
		err  error
		text string
	}{
		{ferr, "ethnl: reading features of nosuch0: no device matches name (no such device)"},
		{cerr, "ethnl: changing features of nosuch0: no device matches name (no such device)"},
	} {
		if tt.err == nil || tt.err.Error() != tt.text {
			t.Errorf("error %q, want %q", tt.err, tt.text)
		}
		if !errors.Is(tt.err, os.ErrNotExist) {
			t.Errorf("%v does not match os.ErrNotExist", tt.err)
		}
		var oe *netlink.OpError
		if errors.As(tt.err, &oe) || errors.Is(tt.err, unix.ENODEV) {
			t.Errorf("%v lets netlink's or unix's error out", tt.err)
		}
	}
	// Only ENODEV is a missing device: ENOENT is not (it means other
	// things to ethtool, such as an unknown string set).
	k.set = &netlink.OpError{Op: "receive", Err: unix.ENOENT}
	if err := c.Change("up0", map[string]bool{"rx-gro": true}); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("ENOENT from a change: %v, want an error not matching os.ErrNotExist", err)
	}
	k.set = &netlink.OpError{Op: "receive", Err: unix.EPERM}
	if err := c.Change("up0", map[string]bool{"rx-gro": true}); !errors.Is(err, os.ErrPermission) {
		t.Errorf("EPERM from a change: %v, want os.ErrPermission", err)
	}
}

func TestAnUnknownFeatureIsNamed(t *testing.T) {
	k := &fakeKernel{ifindex: 3, set: &netlink.OpError{Op: "receive", Err: unix.EOPNOTSUPP, Message: "bit name not found", Offset: 52}}
	c := k.dial(t)
	err := c.Change("up0", map[string]bool{"tx": false, "rx-gro": true, "tx-checksumming": false})
	if !errors.Is(err, ErrUnknownFeature) {
		t.Fatalf("%v does not match ErrUnknownFeature", err)
	}
	if want := `ethnl: changing features of up0: no feature named "tx", "tx-checksumming"`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// With every name known, the kernel's refusal is passed on as it is.
	err = c.Change("up0", map[string]bool{"rx-gro": true})
	if errors.Is(err, ErrUnknownFeature) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("EOPNOTSUPP for known names: %v, want ErrUnsupported only", err)
	}
	if want := "ethnl: changing features of up0: bit name not found (operation not supported)"; err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestATableThatDoesNotFitTheBitsIsAnError(t *testing.T) {
	k := &fakeKernel{ifindex: 3}
	c := k.dial(t)
	c.names["up0"] = featureNames{ifindex: 3, names: []string{"tx-a", "tx-b"}}
	if _, err := c.Features("up0"); err == nil {
		t.Fatal("64 bits named by a table of 2: no error")
	}
	if _, err := c.Features("up0"); err != nil {
		t.Errorf("the misfit table was kept: %v", err)
	}
	if !slices.Equal(k.log, []string{"FEATURES_GET up0", "FEATURES_GET up0", "STRSET_GET #3"}) {
		t.Errorf("requests %v", k.log)
	}
}

func TestAKernelWithoutTheFamilyIsUnsupported(t *testing.T) {
	gc := genltest.Dial(func(greq genetlink.Message, nreq netlink.Message) ([]genetlink.Message, error) {
		if nreq.Header.Type == unix.GENL_ID_CTRL && greq.Header.Command == unix.CTRL_CMD_GETFAMILY {
			return nil, genltest.Error(int(unix.ENOENT))
		}
		return nil, errors.New("not the family lookup")
	})
	defer gc.Close()
	_, err := newConn(gc)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("no ethtool family: %v, want errors.ErrUnsupported", err)
	}
}

func TestNothingToChangeSendsNothing(t *testing.T) {
	k := &fakeKernel{ifindex: 3}
	c := k.dial(t)
	if err := c.Change("up0", nil); err != nil {
		t.Fatal(err)
	}
	if len(k.log) != 0 {
		t.Errorf("requests %v, want none", k.log)
	}
}

func TestErrnosMatchTheirSentinels(t *testing.T) {
	sentinels := map[string]error{
		"os.ErrNotExist": os.ErrNotExist, "os.ErrPermission": os.ErrPermission,
		"errors.ErrUnsupported": errors.ErrUnsupported, "ErrUnknownFeature": ErrUnknownFeature,
	}
	for _, tt := range []struct {
		err  error
		want string // the one sentinel it matches, "" for none
	}{
		{&netlink.OpError{Op: "receive", Err: unix.ENODEV}, "os.ErrNotExist"},
		{&netlink.OpError{Op: "receive", Err: unix.ENOENT}, ""},
		{&netlink.OpError{Op: "receive", Err: unix.EPERM}, "os.ErrPermission"},
		{&netlink.OpError{Op: "receive", Err: unix.EACCES}, "os.ErrPermission"},
		{&netlink.OpError{Op: "receive", Err: unix.EOPNOTSUPP}, "errors.ErrUnsupported"},
		// systemd's RestrictAddressFamilies= refusing the socket.
		{os.NewSyscallError("socket", unix.EAFNOSUPPORT), "errors.ErrUnsupported"},
		{&netlink.OpError{Op: "receive", Err: unix.EINVAL}, ""},
		{errors.New("3 replies to one request"), ""},
	} {
		e := &Error{Op: "reading features", Device: "up0", err: tt.err}
		for name, s := range sentinels {
			if got := errors.Is(e, s); got != (name == tt.want) {
				t.Errorf("%v: errors.Is(%s) = %v", tt.err, name, got)
			}
		}
	}
}
