package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVersionText(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "7baf5003732e8ff7ee44ae2976da3fb67ce53364"},
		{Key: "vcs.time", Value: "2026-11-22T09:13:35Z"},
	}
	platform := " " + runtime.GOOS + "/" + runtime.GOARCH + "\n  promise   " + compatibility + "\n"
	cases := []struct {
		name    string
		ldflags string
		info    *debug.BuildInfo
		want    string
	}{
		{"pseudo-version: the tree's release", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261122091335-7baf5003732e"}, Settings: vcs},
			"relay " + release + "\n" +
				"  revision  7baf5003732e8ff7ee44ae2976da3fb67ce53364\n" +
				"  time      2026-11-22T09:13:35Z\n" +
				"  go        go1.26.8" + platform},
		{"modified tree", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: append([]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, vcs...)},
			"relay " + release + "\n" +
				"  revision  7baf5003732e8ff7ee44ae2976da3fb67ce53364 (modified)\n" +
				"  time      2026-11-22T09:13:35Z\n" +
				"  go        go1.26.8" + platform},
		{"ldflags win", "v1.2.3", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"relay v1.2.3\n" +
				"  revision  7baf5003732e8ff7ee44ae2976da3fb67ce53364\n" +
				"  time      2026-11-22T09:13:35Z\n" +
				"  go        go1.26.8" + platform},
		{"go install module@version: no VCS", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}},
			"relay v1.4.0\n" +
				"  revision  unknown (built without version control information, e.g. with -buildvcs=false)\n" +
				"  go        go1.26.8" + platform},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := versionText(c.ldflags, c.info, true); got != c.want {
				t.Errorf("versionText:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// The built binary's relay version names the commit it was built from and
// that commit's time, as git tells them, and says "(modified)" exactly when
// the build information records uncommitted changes.
func TestVersionNamesTheCommit(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	out, err := exec.CommandContext(context.Background(), bin, "version").Output()
	if err != nil {
		t.Fatalf("relay version: %v", err)
	}
	text := string(out)
	if !strings.HasPrefix(text, "relay ") {
		t.Fatalf("relay version prints %q", text)
	}
	settings := map[string]string{}
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "build" {
			k, v, _ := strings.Cut(f[1], "=")
			settings[k] = v
		}
	}
	head, err := exec.Command("git", "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		// Not a git checkout (a source archive): nothing to name.
		if !strings.Contains(text, "revision  unknown") {
			t.Errorf("outside git, relay version should say the revision is unknown:\n%s", text)
		}
		return
	}
	rev, unix, _ := strings.Cut(strings.TrimSpace(string(head)), " ")
	secs, err := strconv.ParseInt(unix, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Unix(secs, 0).UTC().Format(time.RFC3339)
	for _, want := range []string{"  revision  " + rev, "  time      " + when, "  go        " + runtime.Version()} {
		if !strings.Contains(text, want) {
			t.Errorf("relay version lacks %q:\n%s", want, text)
		}
	}
	if modified := bytes.Contains(out, []byte("(modified)")); modified != (settings["vcs.modified"] == "true") {
		t.Errorf("relay version says modified=%t, the build information vcs.modified=%q:\n%s", modified, settings["vcs.modified"], text)
	}
}

// The release relay version prints is CHANGELOG.md's newest version, and
// that section states the compatibility promise.
func TestReleaseIsTheChangelogs(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)\b`).FindStringSubmatchIndex(string(raw))
	if m == nil {
		t.Fatal("CHANGELOG.md has no versioned section (## vX.Y.Z)")
	}
	if got := string(raw[m[2]:m[3]]); got != release {
		t.Errorf("CHANGELOG.md's newest version is %s, relay version prints %s", got, release)
	}
	section := string(raw[m[0]:])
	if next := regexp.MustCompile(`(?m)^## `).FindAllStringIndex(section, 2); len(next) == 2 {
		section = section[:next[1][0]]
	}
	if !strings.Contains(section, "### Compatibility") {
		t.Errorf("CHANGELOG.md's %s section has no ### Compatibility", release)
	}
}
