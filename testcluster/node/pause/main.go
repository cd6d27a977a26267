// Command pause is the test node's pod sandbox process, after Kubernetes' build/pause/linux/pause.c:
// it holds the pod's namespaces, reaps the zombies it inherits as PID 1 of the pod (SIGCHLD, then
// wait4(-1, WNOHANG) until none is left), and exits 0 on SIGINT or SIGTERM. `pause -v` prints its
// version. Built static (CGO_ENABLED=0) by testcluster/node-build.sh.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is what `pause -v` prints; node-build.sh does not change it.
const version = "sandcap-testcluster-pause 1"

func main() {
	for _, arg := range os.Args[1:] {
		if strings.EqualFold(arg, "-v") {
			fmt.Printf("pause.go %s\n", version)
			return
		}
	}
	if os.Getpid() != 1 {
		// Not an error: pause also runs outside of sandboxes (as pause.c says).
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
			os.Exit(0)
		}
	}
}

// reap collects every child that has exited; SIGCHLDs coalesce, so one signal may stand for many.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
