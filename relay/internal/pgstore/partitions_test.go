package pgstore

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// On a partitioned table each lease write-back reads only the partitions
// that can hold its ids, even as a generic plan (the one a prepared
// statement settles on): its "id BETWEEN" bound lets the partitions be
// pruned when the statement starts. Without it, "id = ANY" looks every id
// up in every partition.
func TestWriteBacksReadOnlyTheirPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, parts := testdb.PartitionedWithPending(t, 20)
	s := newStore(t, pool, table)
	rows, _, err := s.Claim(ctx, "test#1", 20, store.ClaimRange{From: store.Bottom}, nil)
	if err != nil || len(rows) != 20 {
		t.Fatalf("claim = %d rows, %v", len(rows), err)
	}
	ids := make([][16]byte, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	lo, hi := idRange(ids)
	q := s.q
	for _, tc := range []struct {
		name string
		sql  string
		args pgx.NamedArgs
	}{
		{"mark sent", q.markSent, pgx.NamedArgs{"ids": ids, "owner": "test#1", "lo": lo, "hi": hi}},
		{"release", q.release, pgx.NamedArgs{"ids": ids, "owner": "test#1", "lo": lo, "hi": hi}},
		{"extend", q.extend, pgx.NamedArgs{"ids": ids, "owner": "test#1", "lease_ms": int64(30000), "lo": lo, "hi": hi}},
		{"mark retry", q.markRetry, pgx.NamedArgs{"ids": ids, "delays": make([]int64, len(ids)), "errors": make([]string, len(ids)),
			"refunds": make([]int32, len(ids)), "owner": "test#1", "lo": lo, "hi": hi}},
		{"mark failed", q.markFailed, pgx.NamedArgs{"ids": ids, "errors": make([]string, len(ids)),
			"owner": "test#1", "lo": lo, "hi": hi}},
	} {
		read := genericPlanReads(t, pool, tc.sql, tc.args)
		if len(read) != 1 || !strings.HasPrefix(read[0], table.Name+"_p") {
			t.Errorf("%s read %v, want only the partition of its ids", tc.name, read)
		}
		// The same statement without the bound reads every partition.
		bound := regexp.MustCompile(`AND (o\.)?id BETWEEN (@lo) AND (@hi)`)
		if !bound.MatchString(tc.sql) {
			t.Fatalf("%s has no id BETWEEN bound", tc.name)
		}
		unbounded := bound.ReplaceAllString(tc.sql, "AND ${2}::uuid IS NOT NULL AND ${3}::uuid IS NOT NULL")
		if read := genericPlanReads(t, pool, unbounded, tc.args); len(read) < len(parts) {
			t.Errorf("%s without its bound read %v: the test no longer tells the two apart", tc.name, read)
		}
	}
}

// genericPlanReads runs q with args as a generic plan under EXPLAIN
// ANALYZE, in a transaction it rolls back, and returns the relations its
// scans read. EXPLAIN of the statement itself would plan it with the
// values of its parameters; a prepared statement's generic plan has only
// their types. A prepared statement outlives the transaction, so it is
// dropped before the connection goes back to the pool.
func genericPlanReads(t *testing.T, pool *pgxpool.Pool, q string, args pgx.NamedArgs) []string {
	t.Helper()
	// PREPARE takes numbered parameters, as pgx makes them of named ones;
	// EXECUTE takes its values as SQL: a utility statement has no
	// parameters of its own.
	q, values, err := args.RewriteQuery(context.Background(), nil, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	params := make([]string, len(values))
	for i, a := range values {
		params[i] = literal(t, a)
	}
	plan := testdb.ExplainIn(t, pool,
		[]string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE write_back AS " + q},
		[]string{"DEALLOCATE write_back"},
		"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE write_back("+strings.Join(params, ", ")+")")
	return plan.Read()
}

// literal writes the test's argument values as SQL literals.
func literal(t *testing.T, v any) string {
	t.Helper()
	array := func(items []string, typ string) string {
		return "ARRAY[" + strings.Join(items, ", ") + "]::" + typ + "[]"
	}
	switch v := v.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int64:
		return fmt.Sprint(v)
	case [16]byte:
		return "'" + uuid.UUID(v).String() + "'::uuid"
	case [][16]byte:
		items := make([]string, len(v))
		for i, id := range v {
			items[i] = literal(t, id)
		}
		return array(items, "uuid")
	case []string:
		items := make([]string, len(v))
		for i, s := range v {
			items[i] = literal(t, s)
		}
		return array(items, "text")
	case []int64:
		items := make([]string, len(v))
		for i, n := range v {
			items[i] = fmt.Sprint(n)
		}
		return array(items, "bigint")
	case []int32:
		items := make([]string, len(v))
		for i, n := range v {
			items[i] = fmt.Sprint(n)
		}
		return array(items, "int")
	}
	t.Fatalf("no literal for %T", v)
	return ""
}

// On a plain table the claim updates the rows it picked by tuple id; a
// tuple id names a row in each partition, so on a partitioned table it
// finds them by primary key instead (claim.sql's @by_tid). The test puts
// sent rows at the same tuple ids as the pending ones, in another
// partition: the claim takes the pending rows and leaves those alone. The
// plain table's form updates nothing there (it updates only rows of the
// table itself), rather than the rows at those tuple ids in every
// partition.
func TestClaimOnAPartitionedTableTakesOnlyItsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20
	// Pending rows in the current partition, sent rows in the last one;
	// each partition's rows fill its first page from tuple id (0,1).
	pool, table, parts := testdb.PartitionedWithPending(t, n)
	ahead := parts[len(parts)-1].Lower()
	sent := make([]uuid.UUID, n)
	for i := range sent {
		sent[i] = ahead
		sent[i][15] = byte(i + 1)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (id, topic, payload, status, sent_at) SELECT id, 'orders', '\\x00', 'sent', now() FROM unnest($1::uuid[]) AS id", sent); err != nil {
		t.Fatal(err)
	}
	var shared int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" AS p JOIN "+table.Ident()+" AS s ON p.ctid = s.ctid AND p.status = 'pending' AND s.status = 'sent'").Scan(&shared); err != nil || shared != n {
		t.Fatalf("%d pending rows share a tuple id with a sent one (%v), want %d: the test needs them to", shared, err, n)
	}
	untouched := func() {
		t.Helper()
		var changed int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE id = ANY($1) AND (status <> 'sent' OR locked_by IS NOT NULL OR attempt <> 0)", sent).Scan(&changed); err != nil || changed != 0 {
			t.Fatalf("%d sent rows changed (%v)", changed, err)
		}
	}

	s := newStore(t, pool, table)
	// The plain table's form, run here by mistake, claims nothing.
	rows, err := pool.Query(ctx, s.q.claim, s.claimArgs("test#0", n, store.ClaimRange{From: store.Bottom}, nil, true))
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil || rows.CommandTag().RowsAffected() != 0 {
		t.Fatalf("the plain table's claim updated %d rows of a partitioned table (%v)", rows.CommandTag().RowsAffected(), err)
	}
	untouched()

	claimed, _, err := s.Claim(ctx, "test#1", 2*n, store.ClaimRange{From: store.Bottom}, nil)
	if err != nil || len(claimed) != n {
		t.Fatalf("claim = %d rows, %v; want the %d pending ones", len(claimed), err, n)
	}
	untouched()
	var processing int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'processing' AND locked_by = 'test#1'").Scan(&processing); err != nil || processing != n {
		t.Fatalf("%d rows processing under the claim (%v), want %d", processing, err, n)
	}
}
