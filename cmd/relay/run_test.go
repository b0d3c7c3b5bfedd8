package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// On a table that is not migrated, relay run prints the exact relay
// migrate up command for the table it was given (--schema, --table, and
// the database URL as the variable it came from, or as given); run as
// printed, that command migrates that table, and relay run then starts.
// (Its JSON start line shows durations as text.)
func TestRunPrintsTheExactMigrateCommand(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	cases := []struct {
		name    string
		urlEnv  bool
		table   string
		wantCmd func(schema string) string
	}{
		{"URL and schema on the command line, table from the environment", false, "events", func(schema string) string {
			return "relay migrate up --database-url '" + url + "' --schema " + schema + " --table events"
		}},
		{"URL from the environment, default table", true, "", func(schema string) string {
			return `relay migrate up --database-url "$OUTBOX_DATABASE_URL" --schema ` + schema
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool, empty := testdb.NewEmpty(t)
			table := outbox.Table{Schema: empty.Schema, Name: c.table}
			env := map[string]string{}
			args := []string{"run", "--sink", "stdout", "--poll-interval", "20ms", "--log-format", "json", "--schema", table.Schema}
			if c.urlEnv {
				env["OUTBOX_DATABASE_URL"] = url
			} else {
				args = append(args, "--database-url", url)
			}
			if c.table != "" {
				env["OUTBOX_TABLE"] = c.table
			}
			code, _, stderr := invoke(context.Background(), env, args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
			}
			want := "run `" + c.wantCmd(table.Schema) + "`"
			if !strings.Contains(stderr, want) {
				t.Fatalf("stderr does not say %q:\n%s", want, stderr)
			}
			if strings.Contains(stderr, "`relay migrate up`") {
				t.Errorf("stderr still names the bare `relay migrate up`, which would migrate public.outbox:\n%s", stderr)
			}

			// Run the command as printed, in the same environment.
			words := shellWords(t, c.wantCmd(table.Schema), env)
			if words[0] != "relay" {
				t.Fatalf("command %q does not start with relay", words)
			}
			if code, out, stderr := invoke(context.Background(), env, words[1:]...); code != 0 || !strings.Contains(out, "applied 001_create_outbox to "+table.WithDefaults().String()) {
				t.Fatalf("%q: exit %d\n%s%s", words, code, out, stderr)
			}
			if err := migrations.Check(context.Background(), pool, table); err != nil {
				t.Fatalf("after the printed command: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var runOut, runErr syncbuf.Buffer
			done := make(chan int)
			go func() { done <- run(ctx, args, func(k string) string { return env[k] }, &runOut, &runErr) }()
			await(t, 10*time.Second, func() bool { return strings.Contains(runErr.String(), "relay started") })
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("relay run after the printed command: exit %d\n%s", code, runErr.String())
			}
			// Its JSON logs write durations as text.
			for _, line := range strings.Split(runErr.String(), "\n") {
				if strings.Contains(line, `"msg":"relay started"`) &&
					(!strings.Contains(line, `"lease":"30s"`) || !strings.Contains(line, `"poll_interval":"20ms"`)) {
					t.Errorf("the start line does not write its durations as text: %s", line)
				}
			}
		})
	}
}

// shellWords splits a command line the way a POSIX shell would for the
// quoting migrateUpCommand uses: single quotes, double quotes with
// $VARIABLE expansion from env.
func shellWords(t *testing.T, line string, env map[string]string) []string {
	t.Helper()
	var (
		words []string
		word  strings.Builder
		in    bool // inside a word
	)
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == ' ':
			if in {
				words, in = append(words, word.String()), false
				word.Reset()
			}
		case ch == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				t.Fatalf("unterminated ' in %q", line)
			}
			word.WriteString(line[i+1 : i+1+end])
			i, in = i+1+end, true
		case ch == '"':
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				t.Fatalf("unterminated \" in %q", line)
			}
			inner := line[i+1 : i+1+end]
			if name, ok := strings.CutPrefix(inner, "$"); ok {
				inner = env[name]
			}
			word.WriteString(inner)
			i, in = i+1+end, true
		default:
			word.WriteByte(ch)
			in = true
		}
	}
	if in {
		words = append(words, word.String())
	}
	return words
}

func TestMigrateUpCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"defaults, URL on the command line", nil, []string{"--database-url", "postgres://app@db/orders"},
			"relay migrate up --database-url 'postgres://app@db/orders'"},
		{"password masked, quote escaped", nil, []string{"--database-url", "host=db password=s3cret application_name='it''s'"},
			`relay migrate up --database-url 'host=db password=xxxxx application_name='\''it'\'''\''s'\'''`},
		{"URL from the environment", map[string]string{"OUTBOX_DATABASE_URL": "postgres://app:s3cret@db/orders"}, nil,
			`relay migrate up --database-url "$OUTBOX_DATABASE_URL"`},
		{"command line wins over the environment", map[string]string{"OUTBOX_DATABASE_URL": "postgres://env@db/x"}, []string{"--database-url", "postgres://cli@db/x"},
			"relay migrate up --database-url 'postgres://cli@db/x'"},
		{"schema and table", map[string]string{"OUTBOX_SCHEMA": "billing"}, []string{"--database-url", "postgres://db/x", "--table", "events"},
			"relay migrate up --database-url 'postgres://db/x' --schema billing --table events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFlags("relay run", "", &strings.Builder{}, func(k string) string { return c.env[k] })
			var db dbFlags
			db.register(f, "")
			if err := f.parse(c.args); err != nil {
				t.Fatal(err)
			}
			if got := migrateUpCommand(f, db); got != c.want {
				t.Errorf("migrateUpCommand = %s\nwant               %s", got, c.want)
			}
			if strings.Contains(migrateUpCommand(f, db), "s3cret") {
				t.Errorf("the command shows the password")
			}
		})
	}
}
