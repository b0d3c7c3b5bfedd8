package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// FuzzTableTemplates feeds the migrations the schema and table names an
// operator passes with --schema and --table. An invalid name must be
// refused with outbox.ErrInvalidIdentifier before any SQL runs (the
// runners get no database here: touching it would panic). A valid one must
// render every migration, up and down, into SQL that names only the table,
// its schema and objects prefixed with the table name, each a quoted
// identifier PostgreSQL keeps whole (at most 63 bytes).
func FuzzTableTemplates(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"public", "outbox"}, {"App", "Events"}, {"s", strings.Repeat("n", 40)},
		{strings.Repeat("s", 63), "t"}, {"s", strings.Repeat("n", 41)}, {"a.b", "t"},
		{"s", `outbox"; DROP TABLE users; --`}, {"s", "{{.Table}}"}, {"s", `{{related "x"}}`},
		{"pg_catalog", "pg_class"}, {"s", "outbox\n"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, schema, name string) {
		table := outbox.Table{Schema: schema, Name: name}
		ctx := context.Background()
		if err := table.Validate(); err != nil {
			if _, err := Up(ctx, nil, table); !errors.Is(err, outbox.ErrInvalidIdentifier) {
				t.Fatalf("Up(%+v) = %v, want outbox.ErrInvalidIdentifier", table, err)
			}
			if _, _, err := Down(ctx, nil, table); !errors.Is(err, outbox.ErrInvalidIdentifier) {
				t.Fatalf("Down(%+v) = %v, want outbox.ErrInvalidIdentifier", table, err)
			}
			if err := Check(ctx, nil, table); !errors.Is(err, outbox.ErrInvalidIdentifier) {
				t.Fatalf("Check(%+v) = %v, want outbox.ErrInvalidIdentifier", table, err)
			}
			if _, err := Status(ctx, nil, table); !errors.Is(err, outbox.ErrInvalidIdentifier) {
				t.Fatalf("Status(%+v) = %v, want outbox.ErrInvalidIdentifier", table, err)
			}
			return
		}
		d := table.WithDefaults()
		for _, down := range []bool{false, true} {
			sql := render(t, table, down)
			if strings.Contains(sql, "{{") || strings.Contains(sql, "}}") {
				t.Fatalf("unrendered template left for %+v:\n%s", table, sql)
			}
			if !strings.Contains(sql, table.Ident()) {
				t.Fatalf("SQL for %+v never names %s", table, table.Ident())
			}
			// Outside quoted identifiers the SQL is the same whatever the
			// names: no name leaks into it unquoted.
			if got, want := quotedIdent.ReplaceAllString(sql, `""`), quotedIdent.ReplaceAllString(render(t, outbox.Table{}, down), `""`); got != want {
				t.Fatalf("SQL for %+v differs from the default table's outside identifiers:\n%s", table, sql)
			}
			for _, q := range quotedIdent.FindAllString(sql, -1) {
				ident := strings.ReplaceAll(q[1:len(q)-1], `""`, `"`)
				if ident != d.Schema && ident != d.Name && !strings.HasPrefix(ident, d.Name+"_") {
					t.Fatalf("SQL for %+v names %s, neither the table, its schema nor one of its objects", table, q)
				}
				if len(ident) > 63 {
					t.Fatalf("SQL for %+v names %s, %d bytes: PostgreSQL would truncate it", table, q, len(ident))
				}
			}
		}
	})
}

// FuzzCheckVersions stores fuzzed version numbers in the migrations table
// of a real, migrated outbox table, as a hand edit or another binary could
// leave them, and reads them back with Check (what `relay run` does before
// it serves) and Status (`relay migrate status`). Check must decide by the
// highest version: below Latest is ErrNotMigrated, above is
// ErrSchemaTooNew, each naming the table and the versions; Status must list
// every known migration once, applied exactly when its version is stored,
// plus every unknown stored version as "unknown", in version order; Up and
// Down must refuse a table with a version above Latest. Each
// input runs in a transaction that is rolled back; the schema is dropped
// when the fuzz target ends.
func FuzzCheckVersions(f *testing.F) {
	ctx := context.Background()
	// internal/testdb imports this package: read its variable directly.
	url := os.Getenv("OUTBOX_TEST_DATABASE_URL")
	if url == "" {
		f.Fatal("OUTBOX_TEST_DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres)")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		f.Fatalf("connect: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := outbox.Table{Schema: "fuzz_" + hex.EncodeToString(b[:]), Name: "outbox"}
	f.Cleanup(func() {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE"); err != nil {
			f.Errorf("drop schema: %v", err)
		}
		_ = conn.Close(ctx)
	})
	if _, err := Up(ctx, conn, table); err != nil {
		f.Fatalf("migrate: %v", err)
	}
	latest := Latest()
	f.Add(uint8(0), int32(1), int32(2), int32(3))
	f.Add(uint8(1), int32(1), int32(2), int32(3))
	f.Add(uint8(2), int32(1), int32(2), int32(3))
	f.Add(uint8(3), int32(1), int32(2), int32(1000))
	f.Add(uint8(1), int32(latest+1), int32(0), int32(0))
	f.Add(uint8(3), int32(-1), int32(0), int32(latest))
	f.Add(uint8(2), int32(2), int32(2), int32(2))
	f.Add(uint8(3), int32(1<<31-1), int32(-1<<31), int32(1))
	f.Fuzz(func(t *testing.T, n uint8, v1, v2, v3 int32) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "DELETE FROM "+table.Related("migrations")); err != nil {
			t.Fatal(err)
		}
		stored := map[int]bool{}
		for _, v := range []int32{v1, v2, v3}[:n%4] {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table.Related("migrations")+" (version, name) VALUES ($1, 'fuzz') ON CONFLICT DO NOTHING", v); err != nil {
				t.Fatal(err)
			}
			stored[int(v)] = true
		}
		highest := 0
		if len(stored) > 0 {
			highest = slices.Max(slices.Collect(maps.Keys(stored)))
		}

		err = Check(ctx, tx, table)
		switch {
		case highest < latest:
			if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), table.String()) ||
				!strings.Contains(err.Error(), fmt.Sprintf("version %d", highest)) {
				t.Fatalf("versions %v: Check = %v, want ErrNotMigrated naming %s and version %d", stored, err, table, highest)
			}
		case highest > latest:
			if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), table.String()) ||
				!strings.Contains(err.Error(), fmt.Sprintf("version %d, this binary knows up to %d", highest, latest)) {
				t.Fatalf("versions %v: Check = %v, want ErrSchemaTooNew naming %s and both versions", stored, err, table)
			}
			// Neither runner may touch a table a newer binary migrated.
			if applied, err := Up(ctx, tx, table); !errors.Is(err, ErrSchemaTooNew) || len(applied) > 0 {
				t.Fatalf("versions %v: Up = %v, %v; want ErrSchemaTooNew", stored, applied, err)
			}
			if m, ok, err := Down(ctx, tx, table); !errors.Is(err, ErrSchemaTooNew) || ok {
				t.Fatalf("versions %v: Down = %v, %t, %v; want ErrSchemaTooNew", stored, m, ok, err)
			}
		default:
			if err != nil {
				t.Fatalf("versions %v: Check = %v, want nil", stored, err)
			}
		}

		states, err := Status(ctx, tx, table)
		if err != nil {
			t.Fatalf("versions %v: Status = %v", stored, err)
		}
		all, err := All()
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]string{}
		for v := range stored {
			want[v] = "unknown"
		}
		for _, m := range all {
			want[m.Version] = m.Name
		}
		if len(states) != len(want) {
			t.Fatalf("versions %v: Status lists %d states, want %d: %+v", stored, len(states), len(want), states)
		}
		for i, s := range states {
			if i > 0 && states[i-1].Version >= s.Version {
				t.Fatalf("versions %v: Status is not in version order: %+v", stored, states)
			}
			if want[s.Version] != s.Name || s.Applied() != stored[s.Version] {
				t.Fatalf("versions %v: Status says %03d_%s applied=%t", stored, s.Version, s.Name, s.Applied())
			}
		}
	})
}
