package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The TestStores* tests run one suite on every outbox store the relay
// supports: PostgreSQL (relay.New) and MySQL/MariaDB (relay.NewMySQL).
// Each case is written once against storeBackend and runs as the subtests
// "postgres" and "mariadb" with the same assertions, so a promise the
// relay makes on one database is checked on the other. What only
// PostgreSQL offers (lock claims, LISTEN wake-ups, partitions) stays in
// the PostgreSQL-only tests.

// storeBackend is one store's side of the suite: a fresh, migrated outbox
// table of the test's own and the few things a test does to it besides
// running the relay. Times are read relative to the database's clock,
// the only clock the relay trusts.
type storeBackend interface {
	// write commits msgs in one transaction through the store's writer
	// path (Writer.WriteBatch on a pgx transaction, or on
	// outbox.FromMySQL of a database/sql one) and returns their results.
	write(t *testing.T, msgs ...outbox.Message) []outbox.Result
	// writeOpen writes msgs in a transaction it leaves open; end commits
	// it (or rolls it back) and must be called before the test ends.
	writeOpen(t *testing.T, msgs ...outbox.Message) (res []outbox.Result, end func(commit bool))
	// newRelay builds a relay on the test's table with cfg (see
	// storeConfig for the defaults filled in).
	newRelay(t *testing.T, pub publishers.Publisher, cfg relay.Config) *relay.Relay
	// rows reads every row of the table.
	rows(t *testing.T) map[uuid.UUID]storeRow
	// statuses counts rows by status.
	statuses(t *testing.T) map[string]int
	// lapse moves the lease of the processing rows ids ago into the past
	// (a second when ago is 0), as if their claimer had crashed; it fails
	// the test unless every one of them was processing.
	lapse(t *testing.T, ids []uuid.UUID, ago time.Duration)
	// steal leases the processing rows ids to the claim "other" for a
	// minute with one more attempt, as another replica's claim after a
	// lapse would, and returns how many it took (it is called from
	// publishers, so it never stops the test).
	steal(t *testing.T, ids []uuid.UUID) int
	// insertRaw inserts a due pending row by hand, bypassing the writer's
	// validation, with headers as JSON text (malformed rows).
	insertRaw(t *testing.T, topic, headers string) uuid.UUID
	// insertPayload inserts a due pending row of topic with payload by
	// hand, bypassing the writer's limits.
	insertPayload(t *testing.T, topic string, payload []byte) uuid.UUID
	// backdateSent sets sent_at of ids to ago before the database's now,
	// leaving their status alone.
	backdateSent(t *testing.T, ids []uuid.UUID, ago time.Duration)
	// prepareOrdered runs what `relay migrate up --ordered` runs.
	prepareOrdered(t *testing.T)
}

// storeRow is a row's state as the relay left it.
type storeRow struct {
	Status    string
	Attempt   int
	LastError *string
	LockedBy  *string
	// DueIn is next_retry_at minus the database's now when the row was
	// read; negative when due.
	DueIn time.Duration
	// LeaseLeft is locked_until minus the database's now, nil when there
	// is no lease.
	LeaseLeft *time.Duration
	Sent      bool // sent_at is set
}

func (r storeRow) String() string {
	lease := "none"
	if r.LeaseLeft != nil {
		lease = r.LeaseLeft.String()
	}
	return fmt.Sprintf("{%s attempt %d last_error %v locked_by %v due in %v lease %s sent_at set %v}",
		r.Status, r.Attempt, deref(r.LastError), deref(r.LockedBy), r.DueIn, lease, r.Sent)
}

// forEachStore runs test as the parallel subtests "postgres" and
// "mariadb", each on a fresh table of its own: "outbox" in a schema of the
// test's own on PostgreSQL, `outbox` in the connection's database (an
// empty Table.Schema, as users write it) on MariaDB.
func forEachStore(t *testing.T, test func(t *testing.T, s storeBackend)) {
	t.Helper()
	forEachStoreNamed(t, "", test)
}

// forEachStoreNamed is forEachStore on a table called name (the default
// when empty); on MariaDB a named table is also qualified with the
// database, given as Table.Schema.
func forEachStoreNamed(t *testing.T, name string, test func(t *testing.T, s storeBackend)) {
	t.Helper()
	forEachStoreWith(t, name, testdb.Options(t), test)
}

// forEachStoreUnpartitioned is forEachStoreNamed on a PostgreSQL table
// that is never partitioned, even when the suite runs with partitioned
// tables (testdb.Options): for the row deletes of the retention janitor,
// which a partitioned table replaces with dropping whole partitions
// (retention_test.go covers those).
func forEachStoreUnpartitioned(t *testing.T, name string, test func(t *testing.T, s storeBackend)) {
	t.Helper()
	forEachStoreWith(t, name, migrations.Options{}, test)
}

func forEachStoreWith(t *testing.T, name string, pgOpts migrations.Options, test func(t *testing.T, s storeBackend)) {
	t.Helper()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, newPostgresBackend(t, name, pgOpts))
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		test(t, newMariaDBBackend(t, name))
	})
}

// storeConfig fills what a test rarely sets with values that keep tests
// fast, as bundle.config does; fields the test set are kept.
func storeConfig(t *testing.T, table outbox.Table, cfg relay.Config) relay.Config {
	if cfg.Table == (outbox.Table{}) {
		cfg.Table = table
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.OutageBackoffMin == 0 {
		cfg.OutageBackoffMin = 10 * time.Millisecond
	}
	if cfg.OutageBackoffMax == 0 {
		cfg.OutageBackoffMax = 200 * time.Millisecond
	}
	return cfg
}

// startStoreRelay runs a new relay on s until stop is called or the test
// ends.
func startStoreRelay(t *testing.T, s storeBackend, pub publishers.Publisher, cfg relay.Config) *running {
	t.Helper()
	r := s.newRelay(t, pub, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	rr := &running{Relay: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		if err := rr.stop(t); err != nil {
			t.Errorf("relay %s: Run: %v", r.ID(), err)
		}
	})
	return rr
}

// countStatus is the number of rows in status.
func countStatus(t *testing.T, s storeBackend, status string) int {
	t.Helper()
	return s.statuses(t)[status]
}

// resultIDs returns the ids of results, in order.
func resultIDs(res []outbox.Result) []uuid.UUID {
	out := make([]uuid.UUID, len(res))
	for i, r := range res {
		out[i] = r.ID
	}
	return out
}

// storeMessages returns n messages to topic, payload "<prefix>-<i>", key
// "k<i%7>".
func storeMessages(n int, topic, prefix string) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Payload: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return msgs
}

// postgresBackend is a schema of the test's own on the PostgreSQL test
// server, migrated as the existing bundle's, on a pool the relay's
// ConfigurePool set up.
type postgresBackend struct {
	pool   *pgxpool.Pool
	table  outbox.Table
	writer *outbox.Writer
}

func newPostgresBackend(t *testing.T, name string, opts migrations.Options) *postgresBackend {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", testdb.EnvURL, err)
	}
	relay.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	if name == "" {
		name = outbox.DefaultTable
	}
	table := outbox.Table{Schema: "test_" + hex.EncodeToString(b[:]), Name: name}
	t.Cleanup(func() {
		defer pool.Close()
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop test schema: %v", err)
		}
	})
	if _, err := migrations.UpWith(ctx, pool, table, opts); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return &postgresBackend{pool: pool, table: table, writer: w}
}

func (p *postgresBackend) write(t *testing.T, msgs ...outbox.Message) []outbox.Result {
	t.Helper()
	ctx := context.Background()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	res, err := p.writer.WriteBatch(ctx, tx, msgs)
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return res
}

func (p *postgresBackend) writeOpen(t *testing.T, msgs ...outbox.Message) ([]outbox.Result, func(bool)) {
	t.Helper()
	ctx := context.Background()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	res, err := p.writer.WriteBatch(ctx, tx, msgs)
	if err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("WriteBatch: %v", err)
	}
	return res, func(commit bool) {
		t.Helper()
		if !commit {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("rollback: %v", err)
			}
			return
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
}

func (p *postgresBackend) newRelay(t *testing.T, pub publishers.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(p.pool, pub, storeConfig(t, p.table, cfg))
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	return r
}

func (p *postgresBackend) rows(t *testing.T) map[uuid.UUID]storeRow {
	t.Helper()
	rs, err := p.pool.Query(context.Background(), `SELECT id, status, attempt, last_error, locked_by,
    (extract(epoch FROM next_retry_at - clock_timestamp()) * 1000000)::bigint,
    (extract(epoch FROM locked_until - clock_timestamp()) * 1000000)::bigint,
    sent_at IS NOT NULL
FROM `+p.table.Ident())
	if err != nil {
		t.Fatalf("read rows: %v", err)
	}
	out := map[uuid.UUID]storeRow{}
	var (
		id    uuid.UUID
		r     storeRow
		due   int64
		lease *int64
	)
	_, err = pgx.ForEachRow(rs, []any{&id, &r.Status, &r.Attempt, &r.LastError, &r.LockedBy, &due, &lease, &r.Sent}, func() error {
		row := r
		row.DueIn = time.Duration(due) * time.Microsecond
		if lease != nil {
			d := time.Duration(*lease) * time.Microsecond
			row.LeaseLeft = &d
		}
		out[id] = row
		return nil
	})
	if err != nil {
		t.Fatalf("read rows: %v", err)
	}
	return out
}

func (p *postgresBackend) statuses(t *testing.T) map[string]int {
	t.Helper()
	rs, err := p.pool.Query(context.Background(), "SELECT status, count(*) FROM "+p.table.Ident()+" GROUP BY status")
	if err != nil {
		t.Fatalf("count statuses: %v", err)
	}
	m := map[string]int{}
	var status string
	var n int
	if _, err := pgx.ForEachRow(rs, []any{&status, &n}, func() error { m[status] = n; return nil }); err != nil {
		t.Fatalf("count statuses: %v", err)
	}
	return m
}

func (p *postgresBackend) lapse(t *testing.T, ids []uuid.UUID, ago time.Duration) {
	t.Helper()
	tag, err := p.pool.Exec(context.Background(), "UPDATE "+p.table.Ident()+`
SET locked_until = now() - $2 * interval '1 microsecond'
WHERE id = ANY($1)
  AND status = 'processing'`, ids, lapseAgo(ago).Microseconds())
	if err != nil {
		t.Fatalf("lapse leases: %v", err)
	}
	if n := tag.RowsAffected(); n != int64(len(ids)) {
		t.Fatalf("lapsed %d leases, want %d", n, len(ids))
	}
}

func (p *postgresBackend) steal(t *testing.T, ids []uuid.UUID) int {
	t.Helper()
	tag, err := p.pool.Exec(context.Background(), "UPDATE "+p.table.Ident()+`
SET locked_by = 'other', locked_until = now() + interval '1 minute', attempt = attempt + 1
WHERE id = ANY($1)
  AND status = 'processing'`, ids)
	if err != nil {
		t.Errorf("steal rows: %v", err)
	}
	return int(tag.RowsAffected())
}

func (p *postgresBackend) backdateSent(t *testing.T, ids []uuid.UUID, ago time.Duration) {
	t.Helper()
	tag, err := p.pool.Exec(context.Background(), "UPDATE "+p.table.Ident()+`
SET sent_at = now() - $1 * interval '1 microsecond'
WHERE id = ANY($2)`, ago.Microseconds(), ids)
	if err != nil {
		t.Fatalf("backdate sent_at: %v", err)
	}
	if n := tag.RowsAffected(); n != int64(len(ids)) {
		t.Fatalf("backdated %d rows, want %d", n, len(ids))
	}
}

func (p *postgresBackend) insertRaw(t *testing.T, topic, headers string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	_, err := p.pool.Exec(context.Background(), "INSERT INTO "+p.table.Ident()+
		" (id, topic, payload, headers) VALUES ($1, $2, 'x', $3::jsonb)", id, topic, headers)
	if err != nil {
		t.Fatalf("insert a raw row: %v", err)
	}
	return id
}

func (p *postgresBackend) insertPayload(t *testing.T, topic string, payload []byte) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	_, err := p.pool.Exec(context.Background(), "INSERT INTO "+p.table.Ident()+" (id, topic, payload) VALUES ($1, $2, $3)", id, topic, payload)
	if err != nil {
		t.Fatalf("insert a raw row: %v", err)
	}
	return id
}

// mariadbBackend is a database of the test's own on the MariaDB (or
// MySQL) test server, migrated by migrations.UpMySQL. The table is
// `outbox` in the connection's database (an empty Table.Schema), or a
// named table qualified with the database.
type mariadbBackend struct {
	db     *sql.DB
	table  outbox.Table
	ident  string // the table, quoted for MySQL
	writer *outbox.Writer
}

func newMariaDBBackend(t *testing.T, name string) *mariadbBackend {
	t.Helper()
	db, _ := mariadbtest.DB(t)
	var table outbox.Table
	if name != "" {
		var database string
		if err := db.QueryRow("SELECT DATABASE()").Scan(&database); err != nil {
			t.Fatal(err)
		}
		table = outbox.Table{Schema: database, Name: name}
	}
	if _, err := migrations.UpMySQL(context.Background(), db, table); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return &mariadbBackend{db: db, table: table, ident: migrations.MySQLIdent(table), writer: w}
}

func (m *mariadbBackend) write(t *testing.T, msgs ...outbox.Message) []outbox.Result {
	t.Helper()
	ctx := context.Background()
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	res, err := m.writer.WriteBatch(ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return res
}

func (m *mariadbBackend) writeOpen(t *testing.T, msgs ...outbox.Message) ([]outbox.Result, func(bool)) {
	t.Helper()
	ctx := context.Background()
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	res, err := m.writer.WriteBatch(ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		_ = tx.Rollback()
		t.Fatalf("WriteBatch: %v", err)
	}
	return res, func(commit bool) {
		t.Helper()
		if !commit {
			if err := tx.Rollback(); err != nil {
				t.Fatalf("rollback: %v", err)
			}
			return
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
}

func (m *mariadbBackend) newRelay(t *testing.T, pub publishers.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.NewMySQL(m.db, pub, storeConfig(t, m.table, cfg))
	if err != nil {
		t.Fatalf("relay.NewMySQL: %v", err)
	}
	return r
}

func (m *mariadbBackend) rows(t *testing.T) map[uuid.UUID]storeRow {
	t.Helper()
	rs, err := m.db.Query(`SELECT id, status, attempt, last_error, locked_by,
    TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), next_retry_at),
    TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until),
    sent_at IS NOT NULL
FROM ` + m.ident)
	if err != nil {
		t.Fatalf("read rows: %v", err)
	}
	defer rs.Close()
	out := map[uuid.UUID]storeRow{}
	for rs.Next() {
		var (
			raw                 []byte
			r                   storeRow
			lastError, lockedBy sql.NullString
			due                 int64
			lease               sql.NullInt64
		)
		if err := rs.Scan(&raw, &r.Status, &r.Attempt, &lastError, &lockedBy, &due, &lease, &r.Sent); err != nil {
			t.Fatalf("read rows: %v", err)
		}
		id, err := uuid.FromBytes(raw)
		if err != nil {
			t.Fatalf("row id %x: %v", raw, err)
		}
		if lastError.Valid {
			r.LastError = &lastError.String
		}
		if lockedBy.Valid {
			r.LockedBy = &lockedBy.String
		}
		r.DueIn = time.Duration(due) * time.Microsecond
		if lease.Valid {
			d := time.Duration(lease.Int64) * time.Microsecond
			r.LeaseLeft = &d
		}
		out[id] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("read rows: %v", err)
	}
	return out
}

func (m *mariadbBackend) statuses(t *testing.T) map[string]int {
	t.Helper()
	rs, err := m.db.Query("SELECT status, COUNT(*) FROM " + m.ident + " GROUP BY status")
	if err != nil {
		t.Fatalf("count statuses: %v", err)
	}
	defer rs.Close()
	out := map[string]int{}
	for rs.Next() {
		var status string
		var n int
		if err := rs.Scan(&status, &n); err != nil {
			t.Fatalf("count statuses: %v", err)
		}
		out[status] = n
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("count statuses: %v", err)
	}
	return out
}

// lapseAgo is how far lapse moves a lease into the past.
func lapseAgo(ago time.Duration) time.Duration {
	if ago == 0 {
		return time.Second
	}
	return ago
}

// idList returns "?, ?, ..." for ids and the ids as 16-byte arguments.
func idList(ids []uuid.UUID) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id[:]
	}
	return strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", "), args
}

func (m *mariadbBackend) lapse(t *testing.T, ids []uuid.UUID, ago time.Duration) {
	t.Helper()
	list, args := idList(ids)
	res, err := m.db.Exec(`UPDATE `+m.ident+`
SET locked_until = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
WHERE id IN (`+list+`)
  AND status = 'processing'`, append([]any{lapseAgo(ago).Microseconds()}, args...)...)
	if err != nil {
		t.Fatalf("lapse leases: %v", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		t.Fatalf("lapsed %d leases (%v), want %d", n, err, len(ids))
	}
}

func (m *mariadbBackend) insertRaw(t *testing.T, topic, headers string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	_, err := m.db.Exec("INSERT INTO "+m.ident+" (id, topic, payload, headers) VALUES (?, ?, 'x', ?)", id[:], topic, headers)
	if err != nil {
		t.Fatalf("insert a raw row: %v", err)
	}
	return id
}

func (m *mariadbBackend) insertPayload(t *testing.T, topic string, payload []byte) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	if _, err := m.db.Exec("INSERT INTO "+m.ident+" (id, topic, payload) VALUES (?, ?, ?)", id[:], topic, payload); err != nil {
		t.Fatalf("insert a raw row: %v", err)
	}
	return id
}

func (m *mariadbBackend) steal(t *testing.T, ids []uuid.UUID) int {
	t.Helper()
	list, args := idList(ids)
	res, err := m.db.Exec(`UPDATE `+m.ident+`
SET locked_by = 'other', locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, attempt = attempt + 1
WHERE id IN (`+list+`)
  AND status = 'processing'`, args...)
	if err != nil {
		t.Errorf("steal rows: %v", err)
		return 0
	}
	n, _ := res.RowsAffected()
	return int(n)
}

func (m *mariadbBackend) backdateSent(t *testing.T, ids []uuid.UUID, ago time.Duration) {
	t.Helper()
	list, args := idList(ids)
	res, err := m.db.Exec(`UPDATE `+m.ident+`
SET sent_at = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
WHERE id IN (`+list+`)`, append([]any{ago.Microseconds()}, args...)...)
	if err != nil {
		t.Fatalf("backdate sent_at: %v", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		t.Fatalf("backdated %d rows (%v), want %d", n, err, len(ids))
	}
}

func (p *postgresBackend) prepareOrdered(t *testing.T) {
	t.Helper()
	if _, err := migrations.PrepareOrdered(context.Background(), p.pool, p.table); err != nil {
		t.Fatal(err)
	}
}

func (m *mariadbBackend) prepareOrdered(t *testing.T) {
	t.Helper()
	if _, err := migrations.PrepareOrderedMySQL(context.Background(), m.db, m.table); err != nil {
		t.Fatal(err)
	}
}
