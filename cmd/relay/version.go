package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

// versionText is what relay version prints: the version (ldflags, else the
// module's), then the commit the binary was built from, when, and whether
// the tree had uncommitted changes, from the build information Go records
// (go build stamps it by default; -buildvcs=false or a build outside a
// repository leaves it out), and the Go release.
func versionText(ldflags string, info *debug.BuildInfo, ok bool) string {
	v := ldflags
	if v == "" && ok && info.Main.Version != "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "relay %s\n", v)
	settings := map[string]string{}
	if ok {
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		fmt.Fprintf(&b, "  revision  %s\n", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, "  time      %s\n", t)
		}
	} else {
		fmt.Fprintf(&b, "  revision  unknown (built without version control information, e.g. with -buildvcs=false)\n")
	}
	goVersion := runtime.Version()
	if ok && info.GoVersion != "" {
		goVersion = info.GoVersion
	}
	fmt.Fprintf(&b, "  go        %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// buildVersion returns the version text of this binary.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	return versionText(version, info, ok)
}
