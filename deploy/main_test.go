package deploy_test

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the module's root, where the Dockerfile and the Makefile are.
const repoRoot = ".."

var (
	buildOnce sync.Once
	buildDir  string
	relayPath string
	buildErr  error

	helpMu    sync.Mutex
	helpTexts = map[string]string{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// relayBinary returns the relay binary built as the Dockerfile builds it:
// `make build` in the repository's root with the environment the
// Dockerfile's build stage sets (CGO_ENABLED=0), into a temporary
// directory (BIN) instead of bin/relay.
func relayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "deploy-relay-"); err != nil {
			buildErr = err
			return
		}
		relayPath = filepath.Join(buildDir, "relay")
		cmd := exec.Command("make", "--no-print-directory", "build", "BIN="+relayPath)
		cmd.Dir = repoRoot
		cmd.Env = makeEnv()
		for k, v := range df.buildStage().env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("make build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return relayPath
}

// makeEnv is this process's environment without the settings of a make
// that may run the tests (make test): a -n or a variable given to it must
// not reach the make the tests run.
func makeEnv() []string {
	return append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=", "MFLAGS=")
}

// help returns the output of `relay <command...> --help all`: every flag.
func help(t *testing.T, command ...string) string {
	t.Helper()
	key := strings.Join(command, " ")
	helpMu.Lock()
	defer helpMu.Unlock()
	if text, ok := helpTexts[key]; ok {
		return text
	}
	cmd := exec.Command(relayBinary(t), append(command, "--help", "all")...)
	cmd.Env = []string{} // the help shows defaults, not this shell's variables
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("relay %s --help: %v\n%s", key, err, out)
	}
	helpTexts[key] = string(out)
	return string(out)
}

// helpFlagRE matches a flag's line in relay's help: "  --name kind [OUTBOX_NAME]".
var helpFlagRE = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)(?: [a-z]+)?(?: \[([A-Z0-9_]+)\])?$`)

// commandFlags is what `relay <command> --help` offers: flag names and
// their environment variables.
type commandFlags struct {
	flags map[string]bool
	vars  map[string]bool
}

func flagsOf(t *testing.T, command ...string) commandFlags {
	t.Helper()
	text := help(t, command...)
	cf := commandFlags{flags: map[string]bool{}, vars: map[string]bool{}}
	for _, m := range helpFlagRE.FindAllStringSubmatch(text, -1) {
		cf.flags[m[1]] = true
		if m[2] != "" {
			cf.vars[m[2]] = true
		}
	}
	if len(cf.flags) == 0 {
		t.Fatalf("relay %s --help lists no flags:\n%s", strings.Join(command, " "), text)
	}
	return cf
}

// checkArgs fails the test for each --flag of args that the command's help
// does not list; args are what follows the command's own words.
func checkArgs(t *testing.T, where string, cf commandFlags, args []string) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if !cf.flags[name] {
			t.Errorf("%s passes %s, which relay's help does not list", where, a)
		}
	}
}

// flagValue returns the value args give flag name (--name value or
// --name=value).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		switch {
		case a == "--"+name || a == "-"+name:
			if i+1 < len(args) {
				return args[i+1], true
			}
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"="), true
		}
	}
	return "", false
}

// defaultOf returns the default a help text shows for flag name.
func defaultOf(t *testing.T, text, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)\n\s+--` + regexp.QuoteMeta(name) + `\b.*?\(default ([^)]*)\)`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("help shows no default for --%s", name)
	}
	return strings.Trim(m[1], `"`)
}

// isStatic reports whether the ELF file at path needs no dynamic loader or
// shared library.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return false, err
	}
	return len(libs) == 0, nil
}

// readLines returns the lines of a file.
func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines, s.Err()
}
