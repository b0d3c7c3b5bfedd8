package outboxrelay_test

// Tests of README.md: what it tells a newcomer to write and to run must
// work as written.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// block is a fenced code block of README.md or a docs page.
type block struct {
	file    string
	lang    string
	text    string
	line    int    // of the first line inside the fence
	section string // the "## " heading above it
}

// readmeBlocks returns the fenced code blocks of README.md.
func readmeBlocks(t *testing.T) []block { return blocksOf(t, "README.md") }

// blocksOf returns the fenced code blocks of a Markdown file.
func blocksOf(t *testing.T, file string) []block {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []block
		cur     *block
		section string
	)
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{file: file, lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: i + 2, section: section}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: code block never closed", file, cur.line-1)
	}
	return blocks
}

// goBlocks returns the ```go blocks of blocks as Go files: a block
// without a package clause gets one.
func goBlocks(blocks []block) []block {
	var out []block
	for _, b := range blocks {
		if b.lang != "go" {
			continue
		}
		if !regexp.MustCompile(`(?m)^package \w+`).MatchString(b.text) {
			b.text = "package readme\n" + b.text
			b.line--
		}
		out = append(out, b)
	}
	return out
}

// Every ```go block of the README compiles against this module as it is:
// each is built as a package of its own (a file inside the module, given
// to go build as an overlay, so nothing is written into the tree). Compile
// errors name README.md lines.
//
// The first block of docs/consumers.md, the page's opening example, is
// compiled too.
func TestREADMEGoBlocksCompile(t *testing.T) {
	t.Parallel()
	blocks := goBlocks(readmeBlocks(t))
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go blocks")
	}
	consumers := goBlocks(blocksOf(t, "docs/consumers.md"))
	if len(consumers) == 0 || consumers[0].line > 4 {
		t.Fatal("docs/consumers.md does not open with a ```go block")
	}
	blocks = append(blocks, consumers[0])
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		// The //line directive makes errors point into README.md.
		src := fmt.Sprintf("//line %s:%d\n%s", b.file, b.line, b.text)
		file := filepath.Join(tmp, fmt.Sprintf("block%d.go", i))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("internal/readmeblocks/block%d", i)
		overlay[filepath.Join(root, dir, "block.go")] = file
		pkgs = append(pkgs, "./"+dir)
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, js, 0o644); err != nil {
		t.Fatal(err)
	}
	// No bound of its own: a build on a busy machine takes what it takes,
	// and go test's -timeout ends one that hangs.
	cmd := exec.Command("go", append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go code does not compile (%v); write each ```go block as a whole file, imports included (the package clause may be left out):\n%s", err, out)
	}
}

// calls returns "pkg.Func" for every call of a package-qualified function
// in the README's Go blocks, with the call.
func calls(t *testing.T) map[string][]*ast.CallExpr {
	t.Helper()
	out := map[string][]*ast.CallExpr{}
	for _, b := range goBlocks(readmeBlocks(t)) {
		f, err := parser.ParseFile(token.NewFileSet(), "README.md", b.text, 0)
		if err != nil {
			t.Fatalf("README.md:%d: %v", b.line, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok {
						out[pkg.Name+"."+sel.Sel.Name] = append(out[pkg.Name+"."+sel.Sel.Name], call)
					}
				}
			}
			return true
		})
	}
	return out
}

// "In your application" shows, as Go that compiles (the test above), how
// to migrate the table from Go, how to write an event in a transaction,
// and how to write to a table other than public.outbox; and it says that
// the table must be migrated first.
func TestREADMEShowsMigrationAndWriterInGo(t *testing.T) {
	t.Parallel()
	got := calls(t)
	for _, want := range []string{"migrations.Up", "outbox.Write", "outbox.NewWriter"} {
		if len(got[want]) == 0 {
			t.Errorf("no ```go block of the README calls %s", want)
		}
	}
	named := false
	for _, call := range got["outbox.NewWriter"] {
		ast.Inspect(call, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Table" {
					if lit, ok := kv.Value.(*ast.CompositeLit); ok && len(lit.Elts) > 0 {
						named = true
					}
				}
			}
			return true
		})
	}
	if !named {
		t.Errorf("no outbox.NewWriter call of the README names a table (WriterConfig{Table: outbox.Table{...}})")
	}
	text := sectionText(t, "In your application")
	for _, want := range []string{"relay migrate up", "migrations.Up", "does not exist"} {
		if !strings.Contains(text, want) {
			t.Errorf("\"In your application\" does not mention %q", want)
		}
	}
}

// sectionText returns the text of the README's "## name" section.
func sectionText(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n## "+name+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", "## "+name)
	}
	text, _, _ := strings.Cut(rest, "\n## ")
	return text
}

// The README says how to get the relay binary: go install of the module's
// cmd/relay, make build, and go install ./cmd/relay in a clone (which this
// test runs, into a temporary GOBIN, and the binary it installs answers
// relay version). No command of the README runs go build ./cmd/relay
// without -o: at the root, the relay/ directory is in the way.
func TestREADMESaysHowToGetTheBinary(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)`).FindSubmatch(mod)[1]
	var lines []string
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		for _, line := range strings.Split(b.text, "\n") {
			cmd, _, _ := strings.Cut(line, "#")
			lines = append(lines, strings.TrimSpace(cmd))
		}
	}
	has := func(prefix string) bool {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return true
			}
		}
		return false
	}
	for _, want := range []string{"go install " + string(module) + "/cmd/relay@latest", "make build", "go install ./cmd/relay"} {
		if !has(want) {
			t.Errorf("no ```sh block of the README runs %q", want)
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "go build") && !strings.Contains(l, " -o ") {
			t.Errorf("README runs %q: at the repository root go build ./cmd/relay fails (relay/ is a directory); use -o", l)
		}
	}

	mk := exec.Command("make", "-n", "--no-print-directory", "build")
	mk.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=", "MFLAGS=") // not the settings of a make test around this
	out, err := mk.Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	if !bytes.Contains(out, []byte("-o bin/relay ./cmd/relay")) {
		t.Errorf("make build does not build bin/relay: %s", out)
	}

	gobin := t.TempDir()
	// No bound of its own: a build on a busy machine takes what it takes
	// (over 5 minutes was seen), and go test's -timeout ends one that hangs.
	install := exec.Command("go", "install", "./cmd/relay")
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/relay: %v\n%s", err, out)
	}
	version, err := exec.Command(filepath.Join(gobin, "relay"), "version").Output()
	if err != nil || !strings.HasPrefix(string(version), "relay ") {
		t.Fatalf("the installed relay version: %v, %q", err, version)
	}
}

// The quick start says what make test needs, as its prerequisite check
// sees it: every program that scripts/check-prereqs.sh looks for is named,
// with the command that installs them; and it no longer promises "30
// seconds" and "nothing else" (a first make demo downloads and compiles
// for about a minute, make test takes minutes).
func TestREADMEQuickStartNamesWhatMakeTestNeeds(t *testing.T) {
	t.Parallel()
	text := sectionText(t, "Quick start")
	for _, want := range []string{"kcat", "initdb", "postgres", "apt-get install -y postgresql kcat chromium", "scripts/check-prereqs.sh", "OUTBOX_TEST_DATABASE_URL", "Go 1.26"} {
		if !strings.Contains(text, want) {
			t.Errorf("the quick start does not mention %q", want)
		}
	}
	for _, promise := range []string{"30 seconds", "Nothing else"} {
		if strings.Contains(text, promise) {
			t.Errorf("the quick start still promises %q", promise)
		}
	}
	script, err := os.ReadFile("scripts/check-prereqs.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range regexp.MustCompile(`command -v (\w+)`).FindAllSubmatch(script, -1) {
		if name := string(tool[1]); name != "pg_config" && !strings.Contains(text, name) {
			t.Errorf("scripts/check-prereqs.sh looks for %s, which the quick start does not name", name)
		}
	}
}
