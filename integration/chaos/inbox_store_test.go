package chaos

import (
	"context"
	"database/sql"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// effects is the consumer's own database: its inbox table and its effects
// table, one row per applied delivery. The effects table has no unique
// key on the event id, so that an effect applied twice shows as two rows.
type effects interface {
	// handle applies m through the inbox: one effect row, unless m is a
	// duplicate.
	handle(ctx context.Context, m inbox.Message) (duplicate bool, err error)
	// distinct counts the events with an effect.
	distinct(ctx context.Context) (int, error)
	// counts returns the effect rows per event id.
	counts(ctx context.Context) (map[string]int, error)
}

// consumerSchema holds the consumer's tables on the private PostgreSQL
// server, beside the relays' public.outbox.
const consumerSchema = "consumer"

// pgEffects applies effects with inbox.Handle (pgx) on the private
// PostgreSQL server, which pg-restart crashes under it too.
type pgEffects struct {
	pool *pgxpool.Pool
	in   *inbox.Inbox
}

func (d *postgresDB) effects(ctx context.Context, t *testing.T) effects {
	pool, err := pgxpool.New(ctx, d.pg.URL("postgres")+"&application_name=chaos-consumer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := outbox.Table{Schema: consumerSchema}
	if _, err := migrations.UpInbox(ctx, pool, table); err != nil {
		t.Fatalf("migrations.UpInbox: %v", err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE consumer.effects (event_id uuid NOT NULL, topic text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: consumerName, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return &pgEffects{pool: pool, in: in}
}

func (e *pgEffects) handle(ctx context.Context, m inbox.Message) (bool, error) {
	return e.in.Handle(ctx, e.pool, m, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO consumer.effects (event_id, topic) VALUES ($1, $2)", m.ID, m.Topic)
		return err
	})
}

func (e *pgEffects) distinct(ctx context.Context) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, "SELECT count(DISTINCT event_id) FROM consumer.effects").Scan(&n)
	return n, err
}

func (e *pgEffects) counts(ctx context.Context) (map[string]int, error) {
	rows, err := e.pool.Query(ctx, "SELECT event_id::text, count(*) FROM consumer.effects GROUP BY 1")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// mysqlEffects applies effects with inbox.HandleSQL (Config.MySQL) in a
// database of its own on the run's mariadbd, which mariadb-restart kills
// under it too.
type mysqlEffects struct {
	db *sql.DB
	in *inbox.Inbox
}

func (d *mariadbDB) effects(ctx context.Context, t *testing.T) effects {
	db, _ := d.srv.DB(t)
	if _, err := migrations.UpMySQLInbox(ctx, db, outbox.Table{}); err != nil {
		t.Fatalf("migrations.UpMySQLInbox: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (event_id BINARY(16) NOT NULL, topic VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: consumerName, MySQL: true})
	if err != nil {
		t.Fatal(err)
	}
	return &mysqlEffects{db: db, in: in}
}

func (e *mysqlEffects) handle(ctx context.Context, m inbox.Message) (bool, error) {
	return e.in.HandleSQL(ctx, e.db, m, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (event_id, topic) VALUES (?, ?)", m.ID[:], m.Topic)
		return err
	})
}

func (e *mysqlEffects) distinct(ctx context.Context) (int, error) {
	var n int
	err := e.db.QueryRowContext(ctx, "SELECT count(DISTINCT event_id) FROM effects").Scan(&n)
	return n, err
}

func (e *mysqlEffects) counts(ctx context.Context) (map[string]int, error) {
	rows, err := e.db.QueryContext(ctx, "SELECT event_id, count(*) FROM effects GROUP BY event_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id []byte
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		u, err := uuid.FromBytes(id)
		if err != nil {
			return nil, err
		}
		out[u.String()] = n
	}
	return out, rows.Err()
}
