package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int
}

// stage is one FROM and the instructions after it.
type stage struct {
	image, name string
	instrs      []instruction
	env         map[string]string
	workdir     string
}

type dockerfile struct {
	args   map[string]string // ARGs before the first FROM, with their defaults
	stages []*stage
}

func (d *dockerfile) buildStage() *stage { return d.stages[0] }
func (d *dockerfile) finalStage() *stage { return d.stages[len(d.stages)-1] }

// parseDockerfile reads the instructions of a Dockerfile: comments and
// blank lines dropped, lines ending in a backslash joined, ${ARG} of FROM
// and ENV expanded with the ARG defaults.
func parseDockerfile(file string) (*dockerfile, error) {
	lines, err := readLines(file)
	if err != nil {
		return nil, err
	}
	d := &dockerfile{args: map[string]string{}}
	var cur *stage
	stageArgs := map[string]string{}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string {
			if v, ok := stageArgs[k]; ok {
				return v
			}
			return d.args[k]
		})
	}
	for i := 0; i < len(lines); i++ {
		start := i + 1
		text := strings.TrimSpace(lines[i])
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			text = strings.TrimSuffix(text, `\`) + " " + next
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		switch in.cmd {
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			if cur == nil {
				d.args[name] = def
			} else {
				stageArgs[name] = def
			}
		case "FROM":
			f := strings.Fields(expand(in.args))
			cur = &stage{image: f[0], env: map[string]string{}}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				cur.name = f[2]
			}
			stageArgs = map[string]string{}
			d.stages = append(d.stages, cur)
			continue
		}
		if cur == nil {
			if in.cmd != "ARG" {
				return nil, fmt.Errorf("%s:%d: %s before FROM", file, start, in.cmd)
			}
			continue
		}
		switch in.cmd {
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("%s:%d: ENV %q: use ENV KEY=value", file, start, in.args)
				}
				cur.env[k] = expand(strings.Trim(v, `"`))
			}
		case "WORKDIR":
			cur.workdir = path.Join(cur.workdir, in.args)
			if path.IsAbs(in.args) {
				cur.workdir = in.args
			}
		}
		cur.instrs = append(cur.instrs, in)
	}
	if len(d.stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", file)
	}
	return d, nil
}

// find returns the stage's instructions named cmd.
func (s *stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// execForm decodes an instruction's JSON array (exec form).
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Fatalf("Dockerfile:%d: %s %s is not in exec form (a JSON array): %v", in.line, in.cmd, in.args, err)
	}
	return argv
}

// makeBuildOutput returns where `make build` writes the binary (its -o),
// from the command make would run.
func makeBuildOutput(t *testing.T) (command, output string) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-n", "build")
	cmd.Dir = repoRoot
	cmd.Env = makeEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	command = strings.TrimSpace(string(out))
	m := regexp.MustCompile(`(?:^|\s)-o\s+(\S+)`).FindStringSubmatch(command)
	if m == nil || !strings.HasPrefix(command, "go build ") {
		t.Fatalf("make build runs %q: want one go build with -o", command)
	}
	return command, m[1]
}

// TestDockerfileBuildsWithMakeBuild: the image's binary comes from the
// command `make build` runs, is static, and is what the final stage copies
// and runs.
func TestDockerfileBuildsWithMakeBuild(t *testing.T) {
	d, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a build stage and a runtime stage", len(d.stages))
	}
	build, final := d.buildStage(), d.finalStage()

	// The builder's Go is the one go.mod asks for.
	goMod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if want := "golang:" + string(goLine[1]); build.image != want && !strings.HasPrefix(build.image, want+"-") && !strings.HasPrefix(build.image, want+".") {
		t.Errorf("build stage FROM %s, want %s (go.mod: go %s)", build.image, want, goLine[1])
	}
	if build.env["CGO_ENABLED"] != "0" {
		t.Errorf("build stage sets CGO_ENABLED=%q, want 0 (a static binary for distroless/static)", build.env["CGO_ENABLED"])
	}

	// The build stage builds with make build and nothing else.
	makeCmd, makeOut := makeBuildOutput(t)
	t.Logf("make build runs: %s", makeCmd)
	makeBuildRE := regexp.MustCompile(`(?:^|\s|&&|;)make build(?:\s|$)`)
	builds := 0
	for _, in := range build.find("RUN") {
		if makeBuildRE.MatchString(in.args) {
			builds++
		}
		if strings.Contains(in.args, "go build") || strings.Contains(in.args, "go install") {
			t.Errorf("Dockerfile:%d builds with its own go command (%s): use make build", in.line, in.args)
		}
		if regexp.MustCompile(`\bBIN=`).MatchString(in.args) {
			t.Errorf("Dockerfile:%d moves make build's output (%s): the COPY below expects %s", in.line, in.args, makeOut)
		}
	}
	if builds != 1 {
		t.Errorf("build stage runs make build %d times, want 1", builds)
	}

	// The final stage copies make build's output and runs it.
	if !strings.HasPrefix(final.image, "gcr.io/distroless/static") && final.image != "scratch" {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static... or scratch", final.image)
	}
	var binary string
	for _, in := range final.find("COPY") {
		f := strings.Fields(in.args)
		if len(f) == 3 && f[0] == "--from="+build.name {
			if want := path.Join(build.workdir, makeOut); f[1] != want {
				t.Errorf("Dockerfile:%d copies %s from the build stage, but make build writes %s", in.line, f[1], want)
			}
			binary = f[2]
		}
	}
	if binary == "" {
		t.Fatalf("final stage copies nothing from the build stage %q", build.name)
	}
	users := final.find("USER")
	if len(users) == 0 {
		t.Error("final stage sets no USER: the image would run as root")
	} else if u := strings.Split(users[len(users)-1].args, ":")[0]; u == "root" || u == "0" {
		t.Errorf("final stage runs as USER %s", users[len(users)-1].args)
	}
	entry := final.find("ENTRYPOINT")
	if len(entry) != 1 || strings.Join(execForm(t, entry[0]), " ") != binary {
		t.Errorf("ENTRYPOINT %v, want [%q]", entry, binary)
	}
	if cmds := final.find("CMD"); len(cmds) == 1 {
		argv := execForm(t, cmds[0])
		if len(argv) == 0 || argv[0] != "run" {
			t.Errorf("CMD %v, want the relay's run command", argv)
		}
		checkArgs(t, "Dockerfile CMD", flagsOf(t, "run"), argv[1:])
	}

	// The binary make build makes with the build stage's environment is
	// static: distroless/static has no libc.
	static, err := isStatic(relayBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if !static {
		t.Error("make build with the Dockerfile's environment made a dynamically linked binary")
	}
}

// TestDockerfileHealthcheck: HEALTHCHECK runs relay healthcheck with flags
// it has, on the port of the image's metrics listener, on a path the live
// test finds served.
func TestDockerfileHealthcheck(t *testing.T) {
	hc := dockerHealthcheck(t)
	t.Logf("HEALTHCHECK: %v on port %s path %s", hc.argv, hc.port, hc.path)
}

type dockerHC struct {
	argv       []string
	port, path string
}

// dockerHealthcheck checks the Dockerfile's HEALTHCHECK and returns it.
func dockerHealthcheck(t *testing.T) dockerHC {
	t.Helper()
	d, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	final := d.finalStage()
	hcs := final.find("HEALTHCHECK")
	if len(hcs) != 1 {
		t.Fatalf("final stage has %d HEALTHCHECK instructions, want 1", len(hcs))
	}
	_, cmdPart, ok := strings.Cut(hcs[0].args, "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %s has no CMD", hcs[0].args)
	}
	argv := execForm(t, instruction{cmd: "HEALTHCHECK CMD", args: cmdPart, line: hcs[0].line})
	entry := execForm(t, final.find("ENTRYPOINT")[0])
	if len(argv) < 2 || argv[0] != entry[0] || argv[1] != "healthcheck" {
		t.Fatalf("HEALTHCHECK runs %v, want %s healthcheck ... (the image has no curl or shell)", argv, entry[0])
	}
	checkArgs(t, "HEALTHCHECK", flagsOf(t, "healthcheck"), argv[2:])
	addr, ok := flagValue(argv, "addr")
	if !ok {
		t.Fatal("HEALTHCHECK gives no --addr")
	}
	probePath, ok := flagValue(argv, "path")
	if !ok {
		t.Fatal("HEALTHCHECK gives no --path")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("HEALTHCHECK --addr %s: %v", addr, err)
	}
	listen, ok := final.env["OUTBOX_METRICS_ADDR"]
	if !ok {
		t.Fatal("the image sets no OUTBOX_METRICS_ADDR: HEALTHCHECK would find no listener")
	}
	if _, lport, err := net.SplitHostPort(listen); err != nil || lport != port {
		t.Errorf("HEALTHCHECK asks port %s, the image's OUTBOX_METRICS_ADDR is %s", port, listen)
	}
	if !flagsOf(t, "run").vars["OUTBOX_METRICS_ADDR"] {
		t.Error("relay run --help lists no OUTBOX_METRICS_ADDR")
	}
	exposed := false
	for _, in := range final.find("EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			exposed = exposed || strings.TrimSuffix(p, "/tcp") == port
		}
	}
	if !exposed {
		t.Errorf("the image does not EXPOSE the metrics port %s", port)
	}
	return dockerHC{argv: argv, port: port, path: probePath}
}

// TestDockerignoreKeepsTheBuildInputs: nothing make build reads is left out
// of the build context.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	lines, err := readLines(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are not supported by this test", l)
		}
		patterns = append(patterns, strings.TrimPrefix(path.Clean(l), "/"))
	}

	// The files of the module's packages the binary is built from.
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/relay")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	inputs := []string{"go.mod", "go.sum", "Makefile"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, filepath.ToSlash(rel))
	}
	if len(inputs) < 20 {
		t.Fatalf("go list found only %d inputs: %v", len(inputs), inputs)
	}
	for _, in := range inputs {
		for _, p := range patterns {
			if dockerIgnored(p, in) {
				t.Errorf(".dockerignore pattern %q leaves out %s, which make build needs", p, in)
			}
		}
	}
	// And it does leave out what would bloat the context or leak.
	for _, want := range []string{".git", "bin"} {
		ignored := false
		for _, p := range patterns {
			ignored = ignored || dockerIgnored(p, want)
		}
		if !ignored {
			t.Errorf(".dockerignore keeps %s", want)
		}
	}
}

// dockerIgnored reports whether pattern (.dockerignore syntax: filepath.Match
// per segment, ** for any number of segments) excludes file or one of its
// parent directories.
func dockerIgnored(pattern, file string) bool {
	segs := strings.Split(file, "/")
	for n := 1; n <= len(segs); n++ {
		if matchSegments(strings.Split(pattern, "/"), segs[:n]) {
			return true
		}
	}
	return false
}

func matchSegments(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(segs); i++ {
			if matchSegments(pat[1:], segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], segs[0])
	return err == nil && ok && matchSegments(pat[1:], segs[1:])
}
