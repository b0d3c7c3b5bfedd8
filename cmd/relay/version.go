package main

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

// release is this source tree's version: the newest version of
// CHANGELOG.md (TestReleaseIsTheChangelogs).
const release = "v0.1.0"

// compatibility is the promise of release, in one line; CHANGELOG.md says
// it in full.
const compatibility = "v0: a minor release may change the Go API, flags or metrics, and says how in CHANGELOG.md; a patch release never does; the table changes only by migrations"

// pseudoVersion matches the versions Go gives untagged commits.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)

// versionText is what relay version prints: the version (ldflags, else the
// module's when it is a tagged release, else release), then the commit the
// binary was built from, when, and whether the tree had uncommitted
// changes, from the build information Go records (go build stamps it by
// default; -buildvcs=false or a build outside a repository leaves it out),
// the Go release and the compatibility promise.
func versionText(ldflags string, info *debug.BuildInfo, ok bool) string {
	v := ldflags
	if v == "" && ok {
		if m := info.Main.Version; m != "" && m != "(devel)" && !pseudoVersion.MatchString(m) {
			v = m
		}
	}
	if v == "" {
		v = release
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
	fmt.Fprintf(&b, "  promise   %s\n", compatibility)
	return b.String()
}

// buildVersion returns the version text of this binary.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	return versionText(version, info, ok)
}
