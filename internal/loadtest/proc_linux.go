package loadtest

import "syscall"

// sysProcAttr puts a server in a process group of its own, so that a Ctrl-C
// at the terminal reaches only the caller, which then stops it, and has the
// kernel kill it should the caller die first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
