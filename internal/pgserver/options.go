package pgserver

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Options configures Start. The zero value starts a server in a new
// directory under os.TempDir, on a free loopback port, with the default
// settings.
type Options struct {
	// Dir is the parent of the server's own directory, which Start creates
	// with os.MkdirTemp and Close removes. When the process runs as root the
	// postgres OS user must be able to reach it; a t.TempDir is not
	// reachable (it is mode 0700). Defaults to "": os.TempDir.
	Dir string
	// Port is the TCP port the server listens on at 127.0.0.1; it stays the
	// same across Restart. Defaults to 0: a free port.
	Port int
	// Settings are extra run-time parameters, passed as postgres -c
	// name=value, that add to or override the defaults: fsync=off,
	// full_page_writes=off, synchronous_commit=on, max_connections=200,
	// shared_buffers=128MB. listen_addresses, port and
	// unix_socket_directories belong to pgserver and are refused. Defaults
	// to none.
	Settings map[string]string
}

// defaultSettings make a disposable server fast. synchronous_commit stays on:
// a committed row must survive an immediate (crash-like) restart.
var defaultSettings = map[string]string{
	"fsync":              "off",
	"full_page_writes":   "off",
	"synchronous_commit": "on",
	"max_connections":    "200",
	"shared_buffers":     "128MB",
	"logging_collector":  "off", // postgres logs to stderr, which is the log file
}

// reservedSettings are set by pgserver itself.
var reservedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

// validate reports the first invalid option.
func (o Options) validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("pgserver: Port %d is outside 0-65535", o.Port)
	}
	for name := range o.Settings {
		switch {
		case name == "" || strings.ContainsAny(name, "= \t\n"):
			return fmt.Errorf("pgserver: invalid setting name %q", name)
		case slices.Contains(reservedSettings, strings.ToLower(name)):
			return fmt.Errorf("pgserver: setting %q is managed by pgserver", name)
		}
	}
	return nil
}

// settingArgs returns the defaults merged with extra as postgres -c
// arguments, sorted by name.
func settingArgs(extra map[string]string) []string {
	merged := maps.Clone(defaultSettings)
	for name, value := range extra {
		merged[strings.ToLower(name)] = value // names are case-insensitive
	}
	var args []string
	for _, name := range slices.Sorted(maps.Keys(merged)) {
		args = append(args, "-c", name+"="+merged[name])
	}
	return args
}
