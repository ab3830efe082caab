package ethnl

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ErrUnknownFeature is matched by Change's error when the kernel knows no
// feature by one of the names (an ethtool(8) group name such as "tx" is
// not a feature name).
var ErrUnknownFeature = errors.New("no such feature")

// Error is a request that failed. The netlink and errno values stay
// inside: it matches os.ErrNotExist (no such device, ENODEV),
// os.ErrPermission (EPERM, EACCES), errors.ErrUnsupported (EOPNOTSUPP;
// EAFNOSUPPORT: netlink sockets refused, as by systemd's
// RestrictAddressFamilies= without AF_NETLINK) and ErrUnknownFeature, and
// its text carries the kernel's own message.
type Error struct {
	Op     string // what was being done: "reading features", "changing features"
	Device string // "" when the request named none

	err     error    // as netlink returned it
	unknown []string // feature names the kernel does not know
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("ethnl: ")
	b.WriteString(e.Op)
	if e.Device != "" {
		b.WriteString(" of ")
		b.WriteString(e.Device)
	}
	b.WriteString(": ")
	if len(e.unknown) > 0 {
		names := slices.Clone(e.unknown)
		slices.Sort(names)
		for i, n := range names {
			names[i] = strconv.Quote(n)
		}
		fmt.Fprintf(&b, "no feature named %s", strings.Join(names, ", "))
		return b.String()
	}
	if msg, errno := kernelMessage(e.err); msg != "" {
		fmt.Fprintf(&b, "%s (%v)", msg, errno)
		return b.String()
	}
	b.WriteString(e.err.Error())
	return b.String()
}

// kernelMessage returns the kernel's own message about err (an extended
// ack: "no device matches name") and the error it came with; "" if none.
func kernelMessage(err error) (string, error) {
	for ; err != nil; err = errors.Unwrap(err) {
		if oe, ok := err.(*netlink.OpError); ok && oe.Message != "" {
			return oe.Message, oe.Err
		}
	}
	return "", nil
}

// Is matches the sentinels listed on Error.
func (e *Error) Is(target error) bool {
	var errno unix.Errno
	if !errors.As(e.err, &errno) {
		errno = 0
	}
	switch target {
	case ErrUnknownFeature:
		return len(e.unknown) > 0
	case os.ErrNotExist:
		return errno == unix.ENODEV
	case os.ErrPermission:
		return errno == unix.EPERM || errno == unix.EACCES
	case errors.ErrUnsupported:
		return errno == unix.EOPNOTSUPP || errno == unix.EAFNOSUPPORT
	}
	return false
}
