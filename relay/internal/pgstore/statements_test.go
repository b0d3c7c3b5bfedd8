package pgstore

import (
	"context"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Every file in sql/ is a statement the store loads, and every
// statement the store holds comes from a file.
func TestEveryStatementFileIsLoaded(t *testing.T) {
	var read []string
	q := loadStatements(outbox.Table{}.WithDefaults(), func(name string) { read = append(read, name+".sql") })
	files, err := fs.Glob(sqlFiles, "sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		files[i] = path.Base(files[i])
	}
	slices.Sort(read)
	if !slices.Equal(read, files) {
		t.Errorf("statements read %v; files %v", read, files)
	}
	v := reflect.ValueOf(q)
	if v.NumField() != len(files) {
		t.Errorf("statements has %d fields for %d files", v.NumField(), len(files))
	}
	for i := range v.NumField() {
		if text := v.Field(i).String(); text == "" || strings.Contains(text, "{{") || strings.HasPrefix(text, "--") {
			t.Errorf("statement %s is empty, has a name left to fill in, or begins with a comment:\n%s", v.Type().Field(i).Name, text)
		}
	}
}

// Every statement names its parameters (@name, passed as pgx.NamedArgs):
// none has a numbered one ($1) outside a comment.
func TestStatementsHaveNoNumberedParameters(t *testing.T) {
	files, err := fs.Glob(sqlFiles, "sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("statement files %v, %v", files, err)
	}
	numbered := regexp.MustCompile(`\$[0-9]+`)
	for _, f := range files {
		b, err := sqlFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if p := numbered.FindString(code); p != "" {
				t.Errorf("%s:%d: a numbered parameter (%s); name it (@name)", path.Base(f), i+1, p)
			}
		}
	}
}

// Every statement is valid SQL for a migrated table, whatever the table's
// name: the server prepares each.
func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	v := reflect.ValueOf(New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds}).q)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name == "vacuum" {
			continue // a utility statement: it cannot be prepared
		}
		// Named parameters (@name) become positional ones, as pgx.NamedArgs
		// makes them when the statement runs.
		q, _, err := pgx.NamedArgs{}.RewriteQuery(ctx, conn.Conn(), v.Field(i).String(), nil)
		if err != nil {
			t.Fatalf("statement %s: %v", name, err)
		}
		if _, err := conn.Conn().Prepare(ctx, "", q); err != nil {
			t.Errorf("statement %s: %v", name, err)
		}
	}
}

// The claim's parameters choose its plan (custom plans, as ConfigurePool
// sets): with every topic ordered its filter folds to "bucket IS NULL",
// which keyless_idx matches, and without lapsed it does not read
// processing_idx at all.
func TestClaimPlanFollowsItsParameters(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+` (id, topic, key, payload, status, locked_until)
SELECT gen_random_uuid(), 'orders', CASE WHEN i % 2 = 0 THEN int4send(i) END, '\x00',
       (ARRAY['pending', 'processing', 'sent'])[1 + i % 3],
       CASE WHEN i % 3 = 1 THEN now() + interval '1 hour' END
FROM generate_series(1, 20000) AS i`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_custom_plan"); err != nil {
		t.Fatal(err)
	}
	s := New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds})
	explain := func(all bool, topics []string, lapsed bool) string {
		t.Helper()
		s.all, s.topics = all, topics
		return explainPlan(t, conn, s.q.claim, s.claimArgs("test#1", 100, store.ClaimRange{From: store.Bottom, Lapsed: lapsed}, nil, true))
	}
	if testing.Verbose() {
		t.Logf("every topic ordered, no lapsed look-up:\n%s", explain(true, []string{}, false))
	}
	if p := explain(true, []string{}, false); !strings.Contains(p, "keyless_idx") || strings.Contains(p, "processing_idx") {
		t.Errorf("every topic ordered, no lapsed look-up: want keyless_idx and no processing_idx:\n%s", p)
	}
	if p := explain(false, []string{"orders"}, true); !strings.Contains(p, "pending_idx") || !strings.Contains(p, "processing_idx") {
		t.Errorf("some topics ordered, lapsed look-up: want pending_idx and processing_idx:\n%s", p)
	}
	// On a plain table the claimed rows are updated by tuple id, not looked
	// up again in the primary key (claim.sql).
	if p := explain(false, []string{}, false); !strings.Contains(p, "Tid Scan") || strings.Contains(p, "_pkey") {
		t.Errorf("the claim's update: want a Tid Scan and no primary-key look-up:\n%s", p)
	}
}

// explainPlan returns the plan of q with args, planned on db without
// running it.
func explainPlan(t *testing.T, db querier, q string, args ...any) string {
	t.Helper()
	return strings.Join(explainLines(t, db, "", q, args...), "\n") + "\n"
}

// explainAnalyzed runs q under EXPLAIN ANALYZE (no costs or timings) in a
// transaction it rolls back, so that what q writes is undone, and returns
// the plan's lines.
func explainAnalyzed(t *testing.T, pool *pgxpool.Pool, q string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return explainLines(t, tx, "(ANALYZE, COSTS OFF, TIMING OFF) ", q, args...)
}

// querier runs a query: a pool, a connection or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// explainLines returns the lines of EXPLAIN with options (empty: the
// plan alone) of q with args on db.
func explainLines(t *testing.T, db querier, options, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), "EXPLAIN "+options+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// The write-backs of retried and failed rows look the rows up by their
// ids even when the statistics count no row in processing, as after an
// ANALYZE between claims: with only the join to the ids and their range,
// the planner read the whole table (mark_retry.sql).
func TestRetryWriteBacksLookUpRowsByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 4000
	pool, table := testdb.NewUnpartitioned(t)
	s := newStore(t, pool, table)
	testdb.InsertPending(t, pool, table, n)
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	_, ids := claimAll(t, s, "retry#1", n)
	named := ids[:n/40]
	rids, errs := failureColumns(failuresOf(named))
	lo, hi := idRange(rids)
	delays, refunds := make([]int64, len(named)), make([]int32, len(named))
	for _, c := range []struct {
		name string
		q    string
		args pgx.NamedArgs
	}{
		{"mark retry", s.q.markRetry, pgx.NamedArgs{"ids": rids, "delays": delays, "errors": errs, "refunds": refunds,
			"owner": "retry#1", "lo": lo, "hi": hi}},
		{"mark failed", s.q.markFailed, pgx.NamedArgs{"ids": rids, "errors": errs, "owner": "retry#1", "lo": lo, "hi": hi}},
	} {
		lines := explainAnalyzed(t, pool, c.q, c.args)
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "_pkey") {
			t.Errorf("%s of %d rows of %d:\n%s\nwant them looked up in the primary key", c.name, len(named), n, plan)
		}
	}
}

// failuresOf returns a failure for each of ids.
func failuresOf(ids []uuid.UUID) []store.Failure {
	fs := make([]store.Failure, len(ids))
	for i, id := range ids {
		fs[i] = store.Failure{ID: id, Error: "bad"}
	}
	return fs
}
