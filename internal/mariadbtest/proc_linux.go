package mariadbtest

import "syscall"

// sysProcAttr kills mariadbd when the test binary dies, so that a crashed
// or interrupted test run leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
