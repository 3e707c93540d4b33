// Command pause is the sandbox process of every Pod in the kind node image
// (registry.k8s.io/pause, hack/kind/node-image.sh): it holds the Pod's
// namespaces open until the runtime stops it. As PID 1 of a Pod that shares its
// process namespace it also reaps the orphans re-parented to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is the tag of the image that carries this binary.
const version = "3.10.1"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Printf("pause %s (hack/kind/kube/cmd/pause)\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		// The runtime stops a sandbox with SIGTERM (SIGKILL after its grace
		// period); a clean exit lets it tear the Pod down at once.
		fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %s\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child without blocking: one SIGCHLD may stand
// for several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
