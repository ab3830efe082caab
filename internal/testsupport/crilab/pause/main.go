// Command pause is the sandbox ("pause") process of the CRI lab's pod
// sandboxes: it holds the pod's namespaces, reaps orphaned children (it is
// PID 1 of the sandbox's PID namespace) and exits on SIGINT or SIGTERM.
// It is built static (CGO_ENABLED=0) so that it runs in an image with
// nothing else in it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
