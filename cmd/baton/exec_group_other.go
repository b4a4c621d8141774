//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// Without process groups, exec signals CMD alone.
func ownGroup(*exec.Cmd) {}

func signalGroup(c *exec.Cmd, sig syscall.Signal) {
	if c.Process == nil {
		return
	}
	if sig == syscall.SIGKILL {
		_ = c.Process.Kill()
		return
	}
	_ = c.Process.Signal(os.Interrupt)
}

func groupGone(*exec.Cmd) bool { return true }
