package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// binDir finds the directory holding initdb and postgres, once per process.
var binDir = sync.OnceValues(findBinDir)

// findBinDir tries pg_config --bindir, then the highest version under
// /usr/lib/postgresql (Debian's layout, where pg_config may belong to a
// client-only version), then PATH.
func findBinDir() (string, error) {
	var tried []string
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		cancel()
		if err == nil {
			dir := strings.TrimSpace(string(out))
			if hasServer(dir) {
				return dir, nil
			}
			tried = append(tried, dir+" (pg_config --bindir)")
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return slices.Compare(versionOf(b), versionOf(a)) })
	for _, dir := range dirs {
		if hasServer(dir) {
			return dir, nil
		}
	}
	tried = append(tried, "/usr/lib/postgresql/*/bin")
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(initdb); hasServer(dir) {
			return dir, nil
		}
	}
	tried = append(tried, "PATH")
	return "", fmt.Errorf("%w: looked in %s; install the PostgreSQL server (e.g. apt-get install postgresql)",
		ErrNoBinaries, strings.Join(tried, ", "))
}

// hasServer reports whether dir holds executable initdb and postgres.
func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionOf parses the version in /usr/lib/postgresql/<version>/bin:
// "15" is [15], "9.6" is [9 6]. An unparsable version is empty and sorts
// lowest.
func versionOf(binDir string) []int {
	var v []int
	for _, part := range strings.Split(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}
