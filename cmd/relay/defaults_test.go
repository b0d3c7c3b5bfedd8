package main

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/relay"
)

// The defaults are written once, in relay.DefaultConfig. These tests check
// everything else that states them: the flags of relay run and their
// --help, and the configuration tables of README.md (relay run) and
// docs/architecture.md (relay migrate).

// noFlag lists the relay.Config fields that relay run has no flag for,
// and why. Every other field must be in configFlag.
var noFlag = map[string]string{
	// Library users pass a *slog.Logger; the binary builds its own from
	// --log-format and --log-level.
	"Logger": "set from --log-format and --log-level",
	// Library users attach metrics or traces in Go; the binary writes the
	// events to a file.
	"Observer": "set from --observe-file",
}

// invertedFlag lists the boolean fields whose flag says the opposite:
// --listen sets NoListen to false.
var invertedFlag = map[string]bool{"NoListen": true, "NoVacuum": true}

// derivedDefault gives the fields that relay.DefaultConfig leaves zero
// because New computes them at start: their flag's default is zero too, and
// what --help says instead.
var derivedDefault = map[string]string{
	"ID":                   "host-pid-random",
	"PollMin":              relay.DefaultPollMin.String(),
	"BatchMin":             strconv.Itoa(relay.DefaultBatchMin),
	"Ordering.ShardBudget": fmt.Sprintf("%d x --batch-min", relay.DefaultShardBudgetBatches),
}

// zeroWords are the words the docs and --help use for a default that is
// the flag's zero value (an empty string, false, 0s): the flag must be
// given, or it is off.
var zeroWords = map[string]bool{
	"required": true, "required for kafka": true, "required with --sink kafka": true,
	"off": true, "none": true, "no SASL": true, "system roots": true,
}

// sameDefault maps a documented form to the one --help prints.
var sameDefault = map[string]string{"<host>-<pid>-<random>": "host-pid-random"}

// normalDefault reduces a default as a document or --help writes it to one
// form, for a flag of the given kind ("int", "duration", "string", "" for
// booleans): without backquotes, a remark in parentheses ("168h (7 days)")
// or after a comma ("5ms, or --poll-interval when shorter"); durations in
// Go's form ("1m" is "1m0s"); × as x; the zeroWords as the zero value.
func normalDefault(s, kind string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "`", ""))
	if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") {
		s = s[1 : len(s)-1] // "(required)"
	}
	s, _, _ = strings.Cut(s, " (")
	s, _, _ = strings.Cut(s, ", ")
	s = strings.ReplaceAll(s, "×", "x")
	if alias, ok := sameDefault[s]; ok {
		s = alias
	}
	if zeroWords[s] {
		s = ""
	}
	switch {
	case kind == "duration" && s == "":
		return "0s"
	case kind == "duration":
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf("%q (not a duration)", s)
		}
		return d.String()
	case kind == "int" && s == "":
		return "0"
	case kind == "" && s == "":
		return "false"
	}
	return s
}

func TestNormalDefault(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, kind, want string }{
		{"`168h` (7 days)", "duration", "168h0m0s"},
		{"168h0m0s", "duration", "168h0m0s"},
		{"`5ms` (or `--poll-interval` when shorter)", "duration", "5ms"},
		{"5ms, or --poll-interval when shorter", "duration", "5ms"},
		{"", "duration", "0s"},
		{"10 × `--batch-size`", "int", "10 x --batch-size"},
		{"(required)", "string", ""},
		{"required with `--sink kafka`", "string", ""},
		{"off", "", "false"},
		{"none", "string", ""},
		{"`<host>-<pid>-<random>`", "string", "host-pid-random"},
		{"`wait`", "string", "wait"},
	}
	for _, c := range cases {
		if got := normalDefault(c.in, c.kind); got != c.want {
			t.Errorf("normalDefault(%q, %q) = %q, want %q", c.in, c.kind, got, c.want)
		}
	}
}

// helpFlag is a flag as --help prints it.
type helpFlag struct {
	name, kind, env string
	text            string // its explanation, on one line
	def             string // its default as --help prints it; "" if none
}

var helpFlagLine = regexp.MustCompile(`^  --([a-z0-9-]+)(?: ([a-z]+))? \[([A-Z0-9_]+)\]$`)

// helpFlags runs relay with args (ending in --help) and returns the flags
// its help lists, in order.
func helpFlags(t *testing.T, args ...string) []helpFlag {
	t.Helper()
	code, stdout, stderr := invoke(context.Background(), nil, args...)
	if code != 0 {
		t.Fatalf("relay %s: exit %d; stderr:\n%s", strings.Join(args, " "), code, stderr)
	}
	var out []helpFlag
	for _, line := range strings.Split(stdout, "\n") {
		if m := helpFlagLine.FindStringSubmatch(line); m != nil {
			out = append(out, helpFlag{name: m[1], kind: m[2], env: m[3]})
		} else if len(out) > 0 && strings.HasPrefix(line, "        ") {
			out[len(out)-1].text = strings.TrimSpace(out[len(out)-1].text + " " + strings.TrimSpace(line))
		}
	}
	if len(out) == 0 {
		t.Fatalf("relay %s lists no flags:\n%s", strings.Join(args, " "), stdout)
	}
	for i := range out {
		out[i].def = helpDefault(out[i].text)
	}
	return out
}

// helpDefault returns X from the last "(default X)" or "(default: X)" of
// a flag's help text, unquoted; "" when there is none.
func helpDefault(text string) string {
	i := strings.LastIndex(text, "(default")
	if i < 0 {
		return ""
	}
	rest := strings.TrimSpace(strings.TrimPrefix(text[i+len("(default"):], ":"))
	depth := 0
	for j, r := range rest {
		switch r {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				rest = rest[:j]
				if s, err := strconv.Unquote(rest); err == nil {
					return s
				}
				return rest
			}
			depth--
		}
	}
	return rest
}

// configLeaves returns the paths ("BatchSize", "Ordering.Shards") of the
// exported fields of a struct type that are not structs themselves.
func configLeaves(typ reflect.Type, prefix string) []string {
	var out []string
	for _, f := range reflect.VisibleFields(typ) {
		switch {
		case !f.IsExported():
		case f.Type.Kind() == reflect.Struct:
			out = append(out, configLeaves(f.Type, prefix+f.Name+".")...)
		default:
			out = append(out, prefix+f.Name)
		}
	}
	return out
}

// fieldAt returns the field at path of the struct v.
func fieldAt(v reflect.Value, path string) reflect.Value {
	for name := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		v = v.FieldByName(name)
	}
	return v
}

// formatDefault writes a field's value as --help writes the flag's
// default.
func formatDefault(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	case []string:
		return strings.Join(x, ",")
	}
	switch v.Kind() {
	case reflect.Int:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.String:
		return v.String()
	}
	return fmt.Sprintf("%v (a %s: teach formatDefault)", v, v.Type())
}

// Every relay.Config field has a flag in configFlag (or is listed in
// noFlag), that flag is in relay run --help, and its default there is
// relay.DefaultConfig's.
func TestRunFlagsTakeTheirDefaultsFromConfig(t *testing.T) {
	t.Parallel()
	help := map[string]helpFlag{}
	for _, hf := range helpFlags(t, "run", "--help", "all") {
		help[hf.name] = hf
	}
	def := reflect.ValueOf(relay.DefaultConfig())
	for _, path := range configLeaves(def.Type(), "") {
		name, ok := configFlag[path]
		if why, none := noFlag[path]; none {
			if ok {
				t.Errorf("relay.Config.%s is in noFlag (%s) and has a flag in configFlag, --%s", path, why, name)
			}
			continue
		}
		if !ok {
			t.Errorf("relay.Config.%s has no flag: add it to configFlag, or to noFlag saying why", path)
			continue
		}
		hf, ok := help[name]
		if !ok {
			t.Errorf("relay.Config.%s: its flag --%s (configFlag) is not in relay run --help", path, name)
			continue
		}
		v := fieldAt(def, path)
		want := formatDefault(v)
		if invertedFlag[path] {
			want = strconv.FormatBool(!v.Bool())
		}
		if d, ok := derivedDefault[path]; ok {
			if !v.IsZero() {
				t.Errorf("relay.DefaultConfig().%s = %v, but derivedDefault says New derives it (leave it zero)", path, v)
			}
			want = d
		}
		if got := normalDefault(hf.def, hf.kind); got != normalDefault(want, hf.kind) {
			t.Errorf("--%s: relay run --help gives the default %q; relay.DefaultConfig().%s is %q", name, hf.def, path, want)
		}
	}
	for path, name := range configFlag {
		if !fieldAt(def, path).IsValid() {
			t.Errorf("configFlag maps %s to --%s, but relay.Config has no field %s", path, name, path)
		}
	}
}

// docRow is a row of a configuration table: the flags it names, and its
// environment, default and relay.Config cells.
type docRow struct {
	line                  int
	flags                 []string
	env, def, configField string
	hasConfig             bool // the table has a relay.Config column
}

var docFlag = regexp.MustCompile("`--([a-z0-9-]+)`")

// docTable returns the rows of the first table after the line heading in
// file (relative to the repository root), which must have the columns
// flag, environment and default.
func docTable(t *testing.T, file, heading string) []docRow {
	t.Helper()
	b, err := os.ReadFile("../../" + file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	col := map[string]int{}
	var rows []docRow
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			if len(col) > 0 {
				break // the end of the table
			}
			if strings.HasPrefix(l, "#") {
				t.Fatalf("%s: no table under %q", file, heading)
			}
			continue
		}
		cells := tableCells(l)
		if len(col) == 0 {
			for j, c := range cells {
				col[strings.Trim(c, "`")] = j
			}
			for _, want := range []string{"flag", "environment", "default"} {
				if _, ok := col[want]; !ok {
					t.Fatalf("%s:%d: the table under %q has no column %q", file, i+1, heading, want)
				}
			}
			i++ // the | --- | line
			continue
		}
		cell := func(name string) string {
			if j, ok := col[name]; ok && j < len(cells) {
				return cells[j]
			}
			return ""
		}
		row := docRow{line: i + 1, env: cell("environment"), def: cell("default"), configField: cell("relay.Config")}
		_, row.hasConfig = col["relay.Config"]
		for _, m := range docFlag.FindAllStringSubmatch(cell("flag"), -1) {
			row.flags = append(row.flags, m[1])
		}
		rows = append(rows, row)
	}
	return rows
}

// tableCells splits a markdown table row into its trimmed cells; a | in
// backquotes does not split.
func tableCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	code := false
	for _, r := range line {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// docEnv reports whether a row's environment cell names env as the
// variable of its i-th of n flags. The cell lists one variable per flag,
// where `..._MAX` after `OUTBOX_BACKOFF_MIN` is OUTBOX_BACKOFF_MAX, or one
// prefix for all of them, such as `OUTBOX_KAFKA_TLS...`.
func docEnv(cell string, i, n int, env string) bool {
	var items []string
	for j, part := range strings.Split(cell, "`") {
		if j%2 == 1 {
			items = append(items, part)
		}
	}
	if len(items) == 1 && n > 1 {
		p, ok := strings.CutSuffix(items[0], "...")
		return ok && strings.HasPrefix(env, p)
	}
	if len(items) != n {
		return false
	}
	prev := ""
	for j := 0; j <= i; j++ {
		item := items[j]
		if rest, ok := strings.CutPrefix(item, "..._"); ok && prev != "" {
			item = prev[:strings.LastIndex(prev, "_")+1] + rest
		}
		prev = item
	}
	if p, ok := strings.CutSuffix(prev, "..."); ok {
		return strings.HasPrefix(env, p)
	}
	return prev == env
}

// docDefault returns the default of a row's i-th of n flags: its item of
// a comma-separated list with one item per flag ("1s, 5m"), or else the
// whole cell, shared ("off").
func docDefault(cell string, i, n int) string {
	if n > 1 {
		if parts := strings.Split(cell, ", "); len(parts) == n {
			return parts[i]
		}
	}
	return cell
}

// checkDocTable checks that the table lists every flag of the help (but
// those that skip says may be left out) once, with its variable and its
// default, and, if it has a relay.Config column, the field it sets.
func checkDocTable(t *testing.T, file, heading string, flags []helpFlag, skip func(helpFlag) bool) {
	help := map[string]helpFlag{}
	for _, hf := range flags {
		help[hf.name] = hf
	}
	field := map[string]string{} // flag -> the leaf field it sets
	for _, path := range configLeaves(reflect.TypeFor[relay.Config](), "") {
		if name, ok := configFlag[path]; ok {
			field[name] = path
		}
	}
	where := map[string]int{}
	for _, row := range docTable(t, file, heading) {
		if len(row.flags) == 0 {
			t.Errorf("%s:%d: a row of the table under %q names no `--flag`", file, row.line, heading)
		}
		for i, name := range row.flags {
			hf, ok := help[name]
			if !ok {
				t.Errorf("%s:%d: --%s is not a flag of the command (not in its --help)", file, row.line, name)
				continue
			}
			if at, dup := where[name]; dup {
				t.Errorf("%s:%d: --%s is listed again (first on line %d)", file, row.line, name, at)
			}
			where[name] = row.line
			if !docEnv(row.env, i, len(row.flags), hf.env) {
				t.Errorf("%s:%d: --%s: the environment column says %s; its variable is %s", file, row.line, name, row.env, hf.env)
			}
			doc := docDefault(row.def, i, len(row.flags))
			if got, want := normalDefault(doc, hf.kind), normalDefault(hf.def, hf.kind); got != want {
				t.Errorf("%s:%d: --%s: the default column says %q; --help says %q", file, row.line, name, doc, hf.def)
			}
			if row.hasConfig {
				got, _, _ := strings.Cut(strings.ReplaceAll(row.configField, "`", ""), " (")
				if want := field[name]; got != want {
					t.Errorf("%s:%d: --%s: the relay.Config column says %q; configFlag says it sets %q", file, row.line, name, got, want)
				}
			}
		}
	}
	for _, hf := range flags {
		if _, ok := where[hf.name]; !ok && (skip == nil || !skip(hf)) {
			t.Errorf("%s: the table under %q does not list --%s (%s)", file, heading, hf.name, hf.env)
		}
	}
}

// The configuration table of README.md lists every flag of relay run with
// its variable and the default --help gives (it may leave deprecated flags
// out); docs/architecture.md's lists those of relay migrate.
func TestDocsListEveryRunFlagWithItsDefault(t *testing.T) {
	t.Parallel()
	flags := helpFlags(t, "run", "--help", "all")
	deprecated := func(hf helpFlag) bool { return strings.HasPrefix(hf.text, "deprecated") }
	checkDocTable(t, "README.md", "## Configuration", flags, deprecated)
	checkDocTable(t, "docs/architecture.md", "### `relay migrate up|down|status`", helpFlags(t, "migrate", "--help"), nil)
}

var defaultsTo = regexp.MustCompile(`(?i)\bdefaults to (\S+)`)

// The comment of every relay.Config field whose default is a number or a
// duration says "Defaults to X." with relay.DefaultConfig's X (or, for the
// derived ones, DefaultPollMin and DefaultShardBudgetBatches).
func TestConfigCommentsStateTheDefaults(t *testing.T) {
	t.Parallel()
	const file = "relay/config.go" // and ordering.go, Ordering's
	docs := map[string]string{}    // field path -> its comment
	prefix := map[string]string{"Config": "", "Ordering": "Ordering."}
	for _, name := range []string{"../../relay/config.go", "../../relay/ordering.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			p, ok := prefix[ts.Name.Name]
			st, isStruct := ts.Type.(*ast.StructType)
			if !ok || !isStruct {
				return false
			}
			for _, field := range st.Fields.List {
				for _, name := range field.Names {
					docs[p+name.Name] = field.Doc.Text()
				}
			}
			return false
		})
	}
	derived := map[string]reflect.Value{
		"PollMin":              reflect.ValueOf(relay.DefaultPollMin),
		"Ordering.ShardBudget": reflect.ValueOf(relay.DefaultShardBudgetBatches),
	}
	def := reflect.ValueOf(relay.DefaultConfig())
	for _, path := range configLeaves(def.Type(), "") {
		v := fieldAt(def, path)
		if d, ok := derived[path]; ok {
			v = d
		}
		if v.Kind() != reflect.Int && v.Kind() != reflect.Int64 || v.IsZero() {
			continue // strings and booleans say their defaults in words
		}
		doc, ok := docs[path]
		if !ok {
			t.Errorf("%s: no comment found for Config.%s", file, path)
			continue
		}
		m := defaultsTo.FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("%s: the comment of Config.%s does not say \"Defaults to %s.\"", file, path, formatDefault(v))
			continue
		}
		got := strings.TrimRight(m[1], ".,;:")
		kind := "int"
		if v.Type() == reflect.TypeFor[time.Duration]() {
			kind = "duration"
		}
		if normalDefault(got, kind) != normalDefault(formatDefault(v), kind) {
			t.Errorf("%s: the comment of Config.%s says \"Defaults to %s\"; relay.DefaultConfig's is %s", file, path, got, formatDefault(v))
		}
	}
}
