//go:build !linux

package mariadbtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
