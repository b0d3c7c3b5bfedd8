package migrations

import (
	"context"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxrelay/outboxrelay/outbox"
)

func TestAllInVersionOrderWithBothDirections(t *testing.T) {
	t.Parallel()
	all, err := All()
	if err != nil {
		t.Fatalf("All: %v", err)
	}
	if len(all) == 0 {
		t.Fatal("All returned no migrations")
	}
	for i, m := range all {
		if m.Version != i+1 {
			t.Errorf("migration #%d has version %d, want %d: versions must be consecutive from 1", i, m.Version, i+1)
		}
		if m.Name == "" {
			t.Errorf("version %03d has no name", m.Version)
		}
		if strings.TrimSpace(m.up) == "" || strings.TrimSpace(m.down) == "" {
			t.Errorf("version %03d_%s: empty up or down body", m.Version, m.Name)
		}
		for dir, body := range map[string]string{"up": m.up, "down": m.down} {
			if !strings.HasPrefix(body, "--") {
				t.Errorf("%03d_%s.%s.sql does not start with a comment saying why", m.Version, m.Name, dir)
			}
		}
	}
	if got, want := Latest(), all[len(all)-1].Version; got != want {
		t.Errorf("Latest() = %d, want %d", got, want)
	}
}

func TestEmbeddedFileNames(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		t.Fatal(err)
	}
	pattern := regexp.MustCompile(`^\d{3}_[a-z0-9_]+\.(up|down)\.sql$`)
	seen := map[string]int{}
	for _, e := range entries {
		if !pattern.MatchString(e.Name()) {
			t.Errorf("embedded file %q does not match NNN_name.up|down.sql", e.Name())
		}
		seen[strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".up.sql"), ".down.sql")]++
	}
	for base, n := range seen {
		if n != 2 {
			t.Errorf("%s has %d files, want an up and a down", base, n)
		}
	}
	if len(entries) == 0 {
		t.Fatal("no embedded migrations")
	}
}

// recordingTx is a pgx.Tx that keeps the statements given to Exec, so that
// execTemplate renders without a database. Any other method panics.
type recordingTx struct {
	pgx.Tx
	sql []string
}

func (r *recordingTx) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	r.sql = append(r.sql, sql)
	return pgconn.CommandTag{}, nil
}

// render returns the SQL that execTemplate runs for every migration of
// an unpartitioned table.
func render(t *testing.T, table outbox.Table, down bool) string {
	t.Helper()
	return renderShape(t, table, false, down)
}

// renderShape is render for a table partitioned or not.
func renderShape(t *testing.T, table outbox.Table, partitioned, down bool) string {
	t.Helper()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	tx := &recordingTx{}
	for _, m := range all {
		body := m.up
		if down {
			body = m.down
		}
		sh := shape{Table: table.Ident(), Partitioned: partitioned}
		if err := execTemplate(context.Background(), tx, table, sh, m, body); err != nil {
			t.Fatalf("execTemplate %03d_%s: %v", m.Version, m.Name, err)
		}
	}
	return strings.Join(tx.sql, "\n")
}

var quotedIdent = regexp.MustCompile(`"(?:[^"]|"")*"`)

func TestTemplatesRenderForTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		table  outbox.Table
		ident  string // quoted, qualified table
		prefix string // of every object name derived from the table
	}{
		{"other schema and name", outbox.Table{Schema: "billing", Name: "events"}, `"billing"."events"`, "events_"},
		{"mixed case", outbox.Table{Schema: "App", Name: "Events"}, `"App"."Events"`, "Events_"},
		{"explicit defaults", outbox.Table{Schema: "public", Name: "outbox"}, `"public"."outbox"`, "outbox_"},
		// The zero Table means "public"."outbox" everywhere, so its objects
		// must be named as for the explicit defaults.
		{"zero value", outbox.Table{}, `"public"."outbox"`, "outbox_"},
		{"default schema", outbox.Table{Name: "events"}, `"public"."events"`, "events_"},
		{"40-byte name", outbox.Table{Schema: "s", Name: strings.Repeat("n", 40)}, `"s"."` + strings.Repeat("n", 40) + `"`, strings.Repeat("n", 40) + "_"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, shaped := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				partitioned, down := shaped[0], shaped[1]
				sql := renderShape(t, c.table, partitioned, down)
				if strings.Contains(sql, "{{") || strings.Contains(sql, "}}") {
					t.Fatalf("unrendered template left:\n%s", sql)
				}
				if !strings.Contains(sql, c.ident) {
					t.Fatalf("rendered SQL never names %s:\n%s", c.ident, sql)
				}
				for _, q := range quotedIdent.FindAllString(sql, -1) {
					name := strings.ReplaceAll(q[1:len(q)-1], `""`, `"`)
					if name == c.table.WithDefaults().Schema || name == c.table.WithDefaults().Name {
						continue
					}
					if !strings.HasPrefix(name, c.prefix) {
						t.Errorf("object %s is not prefixed with %q", q, c.prefix)
					}
					if len(name) > 63 {
						t.Errorf("object %s is %d bytes, longer than PostgreSQL's 63", q, len(name))
					}
				}
			}
			up := render(t, c.table, false)
			var missing []string
			for _, suffix := range []string{"pending_idx", "processing_idx", "status_check", "dedup_key_idx"} {
				if want := `"` + c.prefix + suffix + `"`; !strings.Contains(up, want) {
					missing = append(missing, want)
				}
			}
			if len(missing) > 0 {
				t.Errorf("up SQL does not create %s:\n%s", strings.Join(missing, ", "), up)
			}
			parted := renderShape(t, c.table, true, false)
			for _, want := range []string{"PARTITION BY RANGE (id)", `"` + c.prefix + `default" PARTITION OF`, `"` + c.prefix + `dedup"`} {
				if !strings.Contains(parted, want) {
					t.Errorf("partitioned up SQL lacks %q", want)
				}
			}
			if strings.Contains(up, "PARTITION") {
				t.Error("unpartitioned up SQL mentions PARTITION")
			}
		})
	}
}

// TestEverySetReads: each set of migrations reads, numbered from 001, and
// each file starts with a comment.
func TestEverySetReads(t *testing.T) {
	t.Parallel()
	for _, s := range []set{pgOutbox, pgInbox, mysqlOutbox, mysqlInbox} {
		all, err := s.all()
		if err != nil || len(all) == 0 || all[0].Version != 1 || s.latest() != all[len(all)-1].Version {
			t.Fatalf("set %q: %d migrations, %v", s.what, len(all), err)
		}
		for _, m := range all {
			if !strings.HasPrefix(m.up, "--") || !strings.HasPrefix(m.down, "--") {
				t.Errorf("set %q: %03d_%s does not start with a comment", s.what, m.Version, m.Name)
			}
		}
	}
}
