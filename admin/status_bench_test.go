package admin_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// envBenchRows names the variable that sets how many rows
// BenchmarkStatusLarge's table holds. Defaults to 100,000.
const envBenchRows = "OUTBOX_BENCH_STATUS_ROWS"

// BenchmarkStatusLarge times the console's overview, Status and
// FailureGroups, on a table of OUTBOX_BENCH_STATUS_ROWS rows (default
// 100,000) in schema bench_status_<rows>, which it builds on first use and
// keeps for the next runs (docs/bench/console/status-10m.txt). Drop it
// with DROP SCHEMA bench_status_<rows> CASCADE.
func BenchmarkStatusLarge(b *testing.B) {
	n := int64(100_000)
	if v := os.Getenv(envBenchRows); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 10_000 {
			b.Fatalf("%s=%q: want a number of rows, at least 10000", envBenchRows, v)
		}
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	table := outbox.Table{Schema: fmt.Sprintf("bench_status_%d", n), Name: "outbox"}
	benchTable(b, pool, table, n)
	adm, err := admin.New(pool, admin.Config{Table: table, Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	status := func(b *testing.B) {
		if _, err := adm.Status(ctx, admin.StatusOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	groups := func(b *testing.B) {
		if _, err := adm.FailureGroups(ctx, admin.Filter{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.B)
	}{
		{"Status", status},
		{"FailureGroups", groups},
		{"Both", func(b *testing.B) { status(b); groups(b) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			start := time.Now()
			for range b.N {
				c.fn(b)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

// benchTable makes table hold n rows as after days of traffic, unless a
// complete one is there already (its comment says so): ids ascending over
// n*40 ms of created_at; per 10,000,000 rows, 10,000 failed ones spread
// over the table (five error texts, a tenth of them parked), and at the
// newest end 3,000 processing (a tenth lapsed), 30,000 pending due and
// 20,000 pending delayed; the rest sent. 20 topics.
func benchTable(b *testing.B, pool *pgxpool.Pool, table outbox.Table, n int64) {
	b.Helper()
	ctx := context.Background()
	done := fmt.Sprintf("bench rows %d", n)
	var comment *string
	err := pool.QueryRow(ctx, "SELECT obj_description(to_regclass($1), 'pg_class')", table.Ident()).Scan(&comment)
	if err != nil {
		b.Fatal(err)
	}
	if comment != nil && *comment == done {
		return
	}
	b.Logf("building %s: %d rows", table.Ident(), n)
	schema := pgx.Identifier{table.Schema}.Sanitize()
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + schema + " CASCADE", "CREATE SCHEMA " + schema} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		b.Fatal(err)
	}
	proc, due, delayed := n*3/10_000, n*3/1000, n*2/1000
	_, err = pool.Exec(ctx, `INSERT INTO `+table.Ident()+`
		(id, topic, key, payload, status, attempt, next_retry_at, locked_by, locked_until, last_error, created_at, sent_at, failed_at)
		SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
		       'topic-' || (g + g / 1000) % 20,
		       convert_to('customer-' || g % 5000, 'UTF8'),
		       convert_to('{"order":' || g || ',"lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"note":"benchmark row"}', 'UTF8'),
		       state,
		       CASE state WHEN 'failed' THEN 10 WHEN 'sent' THEN 1 ELSE g % 3 END,
		       CASE WHEN g > $1 - $2 - $3 - $4 AND g <= $1 - $2 - $3 THEN now() + (g % 600) * interval '1 s' ELSE created END,
		       CASE WHEN state IN ('sent', 'processing', 'failed') THEN 'relay-' || g % 3 || '#' || g / 500 END,
		       CASE WHEN state = 'processing' THEN now() + CASE WHEN g % 10 = 0 THEN interval '-5 s' ELSE interval '30 s' END
		            WHEN state = 'sent' THEN created + interval '30 s' END,
		       CASE WHEN state = 'failed' THEN CASE g / 1000 % 10
		            WHEN 0 THEN 'parked: an earlier event of key customer-' || g % 5000 || ' failed'
		            WHEN 1 THEN 'kafka: message too large: ' || 1048576 + g / 1000 % 1000 || ' bytes'
		            WHEN 2 THEN 'http 400: order ' || g || ' rejected: "invalid sku B-' || g / 1000 % 97 || '"'
		            WHEN 3 THEN 'permanent: schema validation failed at $.lines[' || g / 1000 % 5 || ']'
		            ELSE 'dial tcp 10.0.' || g / 1000 % 8 || '.12:9092: i/o timeout after ' || g / 1000 % 30 || ' s' END END,
		       created,
		       CASE WHEN state = 'sent' THEN created + interval '50 ms' END,
		       CASE WHEN state = 'failed' THEN created + interval '2 min' END
		FROM generate_series(1, $1::bigint) AS g,
		     LATERAL (SELECT now() - ($1 - g) * interval '40 ms' AS created) AS c,
		     LATERAL (SELECT CASE WHEN g % 1000 = 0 THEN 'failed'
		                          WHEN g > $1 - $2 THEN 'processing'
		                          WHEN g > $1 - $2 - $3 - $4 THEN 'pending'
		                          ELSE 'sent' END AS state) AS s`, n, proc, due, delayed)
	if err != nil {
		b.Fatalf("fill %s: %v", table.Ident(), err)
	}
	for _, q := range []string{"VACUUM ANALYZE " + table.Ident(), "COMMENT ON TABLE " + table.Ident() + " IS '" + done + "'"} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}
