package pgserver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// sysProcAttr runs a child as the owner and stops it when this process
// dies: the kernel sends SIGQUIT, postgres's immediate shutdown, when the
// thread that started it exits, which for Go means the process (the runtime
// does not retire threads unless a goroutine exits while locked to one).
func (o *owner) sysProcAttr() (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT}
	if o != nil {
		attr.Credential = &syscall.Credential{Uid: o.uid, Gid: o.gid, Groups: o.groups}
	}
	return attr, nil
}

// checkReachable reports whether the owner may search every directory from
// / down to dir, which postgres needs to reach its data directory. It
// checks mode bits only (no ACLs), which covers the usual failure: a mode
// 0700 directory of root's, such as a t.TempDir.
func (o *owner) checkReachable(dir string) error {
	if o == nil {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		perm := fi.Mode().Perm()
		searchable := perm&0o001 != 0 ||
			st.Uid == o.uid && perm&0o100 != 0 ||
			(st.Gid == o.gid || slices.Contains(o.groups, st.Gid)) && perm&0o010 != 0
		if !searchable {
			return fmt.Errorf("pgserver: running as root, postgres runs as OS user %s, which cannot enter %s (mode %v, uid %d): choose an Options.Dir it can reach, or leave Dir empty for %s",
				o.name, d, perm, st.Uid, os.TempDir())
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}
