//go:build unix

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

// ownGroup makes CMD the leader of a new process group, so that exec signals CMD
// and every process it starts (that stays in the group) at once. A process that
// leaves the group (setsid, a daemon that double-forks into a new session, a
// service started through systemd-run) is not reached. CMD is not in the
// terminal's foreground group: Ctrl-C reaches exec, which stops the group; a CMD
// that reads from a terminal on stdin is stopped (SIGTTIN): give it input through a
// pipe or a file.
func ownGroup(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Setpgid = true
}

// signalGroup sends sig to CMD's process group (its ID is CMD's pid).
func signalGroup(c *exec.Cmd, sig syscall.Signal) {
	if c.Process == nil {
		return
	}
	if err := syscall.Kill(-c.Process.Pid, sig); errors.Is(err, syscall.ESRCH) {
		_ = c.Process.Signal(sig) // no group (it was never made): CMD alone
	}
}

// groupGone reports whether no process of CMD's group remains (zombies of
// processes reparented to a reaper that has not reaped them yet still count).
func groupGone(c *exec.Cmd) bool {
	return c.Process == nil || errors.Is(syscall.Kill(-c.Process.Pid, 0), syscall.ESRCH)
}
