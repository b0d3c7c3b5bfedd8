package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/pgserver"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// postgresDB is the default database: a private PostgreSQL server
// (internal/pgserver), migrated with `relay migrate up`. Relays are told
// apart on the server by their application_name; slot 2 takes lock
// claims, so that both claim modes meet the faults side by side.
type postgresDB struct {
	pg   *pgserver.Server
	pool *pgxpool.Pool // the harness's own connections, not proxied
}

func (d *postgresDB) start(ctx context.Context, t *testing.T) {
	var err error
	if d.pg, err = pgserver.Start(ctx, pgserver.Options{}); err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PostgreSQL log (tail):\n%s", d.logTail())
		}
		if err := d.pg.Close(); err != nil {
			t.Errorf("stop private PostgreSQL: %v", err)
		}
	})
	if d.pool, err = pgxpool.New(ctx, d.pg.URL("postgres")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.pool.Close)
}

// migrate runs `relay migrate up` (with --ordered when ordered) against
// the private server, not proxied.
func (d *postgresDB) migrate(ctx context.Context, t *testing.T, bin string, ordered bool) {
	args := []string{"migrate", "up"}
	if ordered {
		args = append(args, "--ordered")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "OUTBOX_DATABASE_URL="+d.pg.URL("postgres"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("relay migrate up: %v\n%s", err, out)
	}
}

func (d *postgresDB) where() string               { return fmt.Sprintf("PostgreSQL on :%d", d.pg.Port()) }
func (d *postgresDB) upstream() string            { return fmt.Sprintf("127.0.0.1:%d", d.pg.Port()) }
func (d *postgresDB) kinds(all []string) []string { return all }
func (d *postgresDB) logTail() string             { return d.pg.LogTail(40) }

func (d *postgresDB) relayArgs(_ context.Context, slot int, name, addr, ordered string) (args, env []string, err error) {
	claimMode := "lease"
	if slot == 2 {
		claimMode = "lock"
	}
	dsn := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&application_name=%s", addr, name)
	return []string{"--ordered-topics", ordered, "--shards", "8", "--claim-mode", claimMode},
		[]string{"OUTBOX_DATABASE_URL=" + dsn}, nil
}

func (d *postgresDB) restart(ctx context.Context) error {
	return d.pg.Restart(ctx, "immediate")
}

func (d *postgresDB) begin(ctx context.Context) (dbTx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgTx{tx}, nil
}

// pgTx is a producer transaction on PostgreSQL. Commit and rollback run
// to their end even when the producer is being stopped.
type pgTx struct{ tx pgx.Tx }

func (x pgTx) executor() outbox.Executor { return x.tx }
func (x pgTx) commit(ctx context.Context) error {
	return x.tx.Commit(context.WithoutCancel(ctx))
}
func (x pgTx) rollback(ctx context.Context) { _ = x.tx.Rollback(context.WithoutCancel(ctx)) }

func (d *postgresDB) insertMalformed(ctx context.Context, topic, headers string) error {
	_, err := d.pool.Exec(ctx, "INSERT INTO public.outbox (id, topic, payload, headers) VALUES ($1, $2, 'malformed', $3::jsonb)",
		uuid.Must(uuid.NewV7()), topic, headers)
	return err
}

func (d *postgresDB) statuses(ctx context.Context) (map[string]int, error) {
	rows, err := d.pool.Query(ctx, "SELECT status, count(*) FROM public.outbox GROUP BY 1")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

func (d *postgresDB) failed(ctx context.Context) ([]string, error) {
	rows, err := d.pool.Query(ctx, "SELECT topic || ': ' || coalesce(last_error, '') FROM public.outbox WHERE status = 'failed' ORDER BY 1")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// holdingSQL counts the outbox rows relay process $1 holds claimed: with
// lease claims, rows processing under one of its tokens; with lock claims,
// rows its open claim transactions have locked (their xmax is the
// transaction's id).
const holdingSQL = `SELECT count(*)
FROM public.outbox
WHERE status IN ('pending', 'processing')
  AND (status = 'processing' AND locked_by LIKE $1 || '#%'
       OR xmax::text IN (
           SELECT backend_xid::text
           FROM pg_stat_activity
           WHERE application_name = $1
             AND backend_xid IS NOT NULL
             AND state LIKE 'idle in transaction%'))`

func (d *postgresDB) holding(ctx context.Context, name string) int {
	var n int
	err := d.pool.QueryRow(ctx, holdingSQL, name).Scan(&n)
	if err != nil {
		return 0 // the server may be restarting: the caller retries
	}
	return n
}

// activeStatements counts by the process's application_name.
func (d *postgresDB) activeStatements(ctx context.Context, name string) int {
	var n int
	err := d.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'", name).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}
