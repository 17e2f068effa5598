//go:build unix && !linux

package loadtest

import "syscall"

// sysProcAttr puts a server in a process group of its own, so that a Ctrl-C
// at the terminal reaches only the caller, which then stops it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
