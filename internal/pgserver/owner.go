package pgserver

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// owner is the OS user that runs initdb and postgres when this process is
// root, which both refuse to run as. A nil *owner means the current user.
type owner struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary groups
}

// lookupOwner returns the postgres OS user when running as root, else nil.
func lookupOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root, and initdb and postgres refuse root, so they run as the OS user postgres: %w", err)
	}
	o := &owner{name: u.Username}
	if o.uid, err = parseID(u.Uid); err != nil {
		return nil, err
	}
	if o.gid, err = parseID(u.Gid); err != nil {
		return nil, err
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("pgserver: groups of OS user postgres: %w", err)
	}
	for _, g := range gids {
		id, err := parseID(g)
		if err != nil {
			return nil, err
		}
		o.groups = append(o.groups, id)
	}
	return o, nil
}

// parseID parses a numeric user or group id.
func parseID(s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("pgserver: OS user postgres: id %q is not numeric", s)
	}
	return uint32(id), nil
}

// chown gives paths to the owner; it does nothing for the current user.
func (o *owner) chown(paths ...string) error {
	if o == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, int(o.uid), int(o.gid)); err != nil {
			return fmt.Errorf("pgserver: give %s to OS user %s: %w", p, o.name, err)
		}
	}
	return nil
}

// childEnv is this process's environment without PG* variables, which would
// otherwise steer initdb and postgres (PGDATA, PGPORT, ...), and in the C
// locale, so that their messages are in English.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}
