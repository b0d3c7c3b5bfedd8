//go:build !linux

package pgserver

import (
	"errors"
	"syscall"
)

// sysProcAttr runs a child as the current user; running as another user is
// implemented on Linux only.
func (o *owner) sysProcAttr() (*syscall.SysProcAttr, error) {
	if o != nil {
		return nil, errors.New("pgserver: running as root is supported on Linux only")
	}
	return nil, nil
}

// checkReachable has nothing to check for the current user.
func (o *owner) checkReachable(string) error { return nil }
