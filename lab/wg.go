package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// wgSocketDir is where wireguard-go (and wgctrl) keep UAPI sockets, shared
// by every namespace on the machine.
const wgSocketDir = "/var/run/wireguard"

// wgDevice is one wireguard-go device living in a namespace, with a UAPI
// listener so that wgctrl and wg(8) drive it like the kernel module.
type wgDevice struct {
	name string
	dev  *device.Device
	uapi net.Listener
	wg   sync.WaitGroup
}

// nsBind opens wireguard-go's UDP sockets inside a namespace: the device
// re-opens its bind on every up and port change, from its own goroutines.
type nsBind struct {
	conn.Bind
	ns netns.NsHandle
}

func (b *nsBind) Open(port uint16) (fns []conn.ReceiveFunc, actual uint16, err error) {
	derr := doIn(b.ns, func() error {
		fns, actual, err = b.Bind.Open(port)
		return nil
	})
	if derr != nil {
		return nil, 0, derr
	}
	return fns, actual, err
}

// startWG creates the TUN device name inside ns, a wireguard-go device on
// it and its UAPI socket. The device has no key or peers yet: configure it
// with wgctrl. A stale socket of the same name (from a killed run) is
// replaced.
func startWG(ns netns.NsHandle, name string, log *slog.Logger) (*wgDevice, error) {
	var td tun.Device
	err := doIn(ns, func() error {
		var err error
		td, err = tun.CreateTUN(name, device.DefaultMTU)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating tun %s: %w", name, err)
	}
	lg := &device.Logger{
		Verbosef: device.DiscardLogf,
		Errorf: func(format string, args ...any) {
			log.Debug(fmt.Sprintf(format, args...), "device", name)
		},
	}
	dev := device.NewDevice(td, &nsBind{Bind: conn.NewDefaultBind(), ns: ns}, lg)
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("opening uapi socket for %s: %w", name, err)
	}
	l, err := ipc.UAPIListen(name, f)
	f.Close()
	if err != nil {
		dev.Close()
		_ = os.Remove(filepath.Join(wgSocketDir, name+".sock"))
		return nil, fmt.Errorf("listening on uapi socket for %s: %w", name, err)
	}
	w := &wgDevice{name: name, dev: dev, uapi: l}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				dev.IpcHandle(c)
			}()
		}
	}()
	if err := dev.Up(); err != nil {
		w.close()
		return nil, fmt.Errorf("bringing up %s: %w", name, err)
	}
	return w, nil
}

// close stops the device (its TUN link disappears with it) and removes the
// UAPI socket. It waits for the UAPI goroutines.
func (w *wgDevice) close() error {
	if w == nil {
		return nil
	}
	err := w.uapi.Close()
	w.dev.Close()
	w.wg.Wait()
	if rerr := os.Remove(filepath.Join(wgSocketDir, w.name+".sock")); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if err != nil && errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
