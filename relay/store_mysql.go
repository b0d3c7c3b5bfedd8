package relay

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// mysqlStore is the store for MySQL 8.0.13+ and MariaDB 10.6+: the lease
// path and the retention janitor (store.Store), with
// pgStore's semantics, over database/sql
// (go-sql-driver/mysql). Each statement is a file in sql/mysql; {{table}}
// and {{jobs}} name the outbox table and its jobs table
// (migrations.MySQLIdent). As on PostgreSQL, durations travel as
// milliseconds and every time is computed by the database, here with
// UTC_TIMESTAMP(6) (DATETIME columns have no zone; NOW() would follow the
// session's time_zone), and every write-back is fenced by the claim token
// in locked_by.
//
// MySQL has no UPDATE ... RETURNING and cannot UPDATE a table it selects
// from in a subquery, so a claim is a short READ COMMITTED transaction:
// SELECT the rows FOR UPDATE SKIP LOCKED (their data too, so no third
// statement reads them back), UPDATE them by id with the lease, commit.
// READ COMMITTED, because under REPEATABLE READ a locking range read also
// locks the gaps of due_idx it walked, and the writers' inserts of new due
// rows would wait for the claim to commit.
//
// Lists of rows travel as IN lists: {{ids}} in a file becomes one
// placeholder per row, and {{cases}} one "WHEN ? THEN ?" per row for the
// per-row values of retries and failures (PostgreSQL passes arrays and
// unnests them). The parameter list therefore grows with the batch. A
// join with JSON_TABLE would keep it fixed, but MariaDB runs a
// multi-table UPDATE through a temporary table, on disk when a text column
// is set: slower, and under parallel tests one failed with "Error on
// delete of /tmp/#sql-update-....MAI (Errcode: 2)". FORCE
// INDEX (PRIMARY) makes every id one primary-key look-up whatever the
// statistics say: a scan, which the planner picks for a small table,
// would lock, and wait on, rows other claims hold. The claims' scans name
// their index too (due_idx, lapsed_idx, sent_idx: the names MySQL
// migration 001 gives them).
//
// Row counts are the server's "changed" rows (go-sql-driver's default);
// every fenced write-back changes a column of each row it matches
// (status, or the lease end of extend), so changed and matched agree,
// and a DSN with clientFoundRows=true counts the same.
//
// Left out, next to store:
//   - ordering: the claims take every row, keyed or not. Ordered delivery
//     needs a design of its own on MySQL (docs/ordering.md#mysql-and-mariadb), so
//     claimLocked, claimOrdered and the shard statements have no
//     counterpart yet.
//   - listen: MySQL has no LISTEN/NOTIFY; the relay polls.
//   - vacuum and inJob (partition maintenance): InnoDB purges on its own,
//     and MySQL outbox tables are never partitioned.
type mysqlStore struct {
	db    *sql.DB
	table outbox.Table
	lease time.Duration
	bytes store.Bounds
	q     mysqlStatements
}

//go:embed sql/mysql/*.sql
var mysqlSQL embed.FS

// mysqlStatements are the texts of the MySQL statements for one table,
// each named for its file in sql/mysql.
type mysqlStatements struct {
	claimSwept, claimLapsed, claimDue, claimLease, claimRead   string
	markSent, markRetry, markFailed, release, extend, countDue string
	backlog, backlogEstimate                                   string
	claimJob, pickSent, deleteSent, recordBatch, finishJob     string
	lookBelow                                                  string
}

// loadMySQLStatements reads the MySQL statements for table. read records
// each file it reads, for the test that every file is used.
func loadMySQLStatements(table outbox.Table, read func(file string)) mysqlStatements {
	names := strings.NewReplacer("{{table}}", migrations.MySQLIdent(table), "{{jobs}}", migrations.MySQLRelated(table, "jobs"))
	file := func(name string) string {
		if read != nil {
			read(name)
		}
		b, err := mysqlSQL.ReadFile("sql/mysql/" + name + ".sql")
		if err != nil {
			panic(err) // embedded: a missing file is a build mistake
		}
		return names.Replace(stripComments(string(b)))
	}
	return mysqlStatements{
		claimSwept: file("claim_swept"), claimLapsed: file("claim_lapsed"), claimDue: file("claim_due"), claimLease: file("claim_lease"),
		claimRead: file("claim_read"), markSent: file("mark_sent"), markRetry: file("mark_retry"), markFailed: file("mark_failed"),
		release: file("release"), extend: file("extend"), countDue: file("count_due"),
		backlog: file("backlog"), backlogEstimate: file("backlog_estimate"),
		claimJob: file("claim_job"), pickSent: file("pick_sent"), deleteSent: file("delete_sent"),
		recordBatch: file("record_batch"), finishJob: file("finish_job"),
		lookBelow: file("look_below"),
	}
}

// newMySQLStore returns the store of table on db. table.Schema empty
// means the connection's database (migrations.MySQLIdent).
func newMySQLStore(db *sql.DB, table outbox.Table, lease time.Duration, bytes store.Bounds) *mysqlStore {
	return &mysqlStore{db: db, table: table, lease: lease, bytes: bytes, q: loadMySQLStatements(table, nil)}
}

// Ready checks that the database answers, that the server is one the
// relay supports, and that the table's schema is the one this relay needs.
func (s *mysqlStore) Ready(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return err
	}
	return migrations.CheckMySQL(ctx, s.db, s.table)
}

// Fatal reports MySQL errors that retrying cannot fix: a missing or
// newer schema, an unsupported server, an invalid name, and server answers
// about access, unknown databases or tables, and syntax.
func (s *mysqlStore) Fatal(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1049, 1142, 1143, 1146, 1054, 1064, 1227:
			// access denied to the database, to the user; unknown database;
			// command or column denied; no such table; unknown column;
			// syntax; missing privilege.
			return true
		}
		return false
	}
	return errors.Is(err, migrations.ErrNotMigrated) || errors.Is(err, migrations.ErrSchemaTooNew) ||
		errors.Is(err, migrations.ErrServerTooOld) || errors.Is(err, migrations.ErrStatementBinlog) ||
		errors.Is(err, migrations.ErrNoDatabase) || errors.Is(err, outbox.ErrInvalidIdentifier)
}

// claimTx is the transaction of a claim or a retention batch.
var claimTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// Claim takes up to limit rows and leases them to owner, as Store.Claim
// does: the rows of rg.swept that are still due pending rows or lapsed
// leases, then, when rg.lapsed, rows whose lease ran out (within
// rg.lapsedWithin before now, when that is set), then due pending rows
// from rg.from up. In the same transaction, first, it marks the rows of
// earlier claims in sent sent: fenced[i] counts the rows of sent[i] that
// another claim held by then. On an error nothing is written.
//
// Each part is a statement of its own in one transaction (PostgreSQL
// reads the three in one UNION ALL); a row two parts both find, which
// SKIP LOCKED does not skip since this transaction holds it, is taken
// once. The parts return each row's size, not its payload, key and
// headers: the claim keeps rows up to the one at which their sizes reach
// s.bytes.batch, as claim.sql does, leases them, and then reads those of
// them within s.bytes.event (claim_read.sql).
func (s *mysqlStore) Claim(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) (rows []store.Row, fenced []int, err error) {
	err = onDeadlock(func() error {
		var err error
		rows, fenced, err = s.claimOnce(ctx, owner, limit, rg, sent)
		return err
	})
	return rows, fenced, err
}

// claimOnce is one attempt of claim.
func (s *mysqlStore) claimOnce(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) (rows []store.Row, fenced []int, err error) {
	tx, err := s.db.BeginTx(ctx, claimTx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	fenced = make([]int, len(sent))
	for i, sb := range sent {
		if fenced[i], err = execFenced(ctx, tx, "claim: mark sent", expand(s.q.markSent, len(sb.IDs)), len(sb.IDs), append(idArgs(sb.IDs), sb.Owner)...); err != nil {
			return nil, nil, err
		}
	}
	seen := map[uuid.UUID]bool{}
	bytes := 0 // the rows' sizes so far, as Bounds.RowBytes counts them
	room := func() bool { return len(rows) < limit && bytes < s.bytes.Batch }
	pick := func(q string, args ...any) error {
		got, err := s.lockRows(ctx, tx, q, args...)
		if err != nil {
			return err
		}
		for _, r := range got {
			if !seen[r.ID] && room() {
				seen[r.ID] = true
				rows = append(rows, r)
				if !s.bytes.TooLarge(&r) {
					bytes += int(r.Size)
				}
			}
		}
		return nil
	}
	if len(rg.Swept) > 0 {
		if err := pick(expand(s.q.claimSwept, len(rg.Swept)), append(idArgs(rg.Swept), limit)...); err != nil {
			return nil, nil, err
		}
	}
	if rg.Lapsed && room() {
		within := rg.LapsedWithin.Milliseconds()
		if err := pick(s.q.claimLapsed, within, within, limit-len(rows)); err != nil {
			return nil, nil, err
		}
	}
	if room() {
		due, id := mysqlFloor(rg.From)
		if err := pick(s.q.claimDue, due, due, id, limit-len(rows)); err != nil {
			return nil, nil, err
		}
	}
	if len(rows) > 0 {
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		res, err := tx.ExecContext(ctx, expand(s.q.claimLease, len(ids)), append([]any{owner, s.lease.Milliseconds()}, idArgs(ids)...)...)
		if err != nil {
			return nil, nil, fmt.Errorf("claim: lease: %w", err)
		}
		// The rows are locked by this transaction: each must take the lease.
		if n, err := res.RowsAffected(); err != nil || n != int64(len(rows)) {
			return nil, nil, fmt.Errorf("claim: leased %d of %d locked rows (%v)", n, len(rows), err)
		}
		if err := s.readRows(ctx, tx, rows); err != nil {
			return nil, nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("claim: commit: %w", err)
	}
	return rows, fenced, nil
}

// lockRows runs one of the claim's SELECT ... FOR UPDATE SKIP LOCKED
// statements and reads its rows, without their payload, key and headers.
func (s *mysqlStore) lockRows(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]store.Row, error) {
	rs, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rs.Close()
	var out []store.Row
	for rs.Next() {
		var r store.Row
		var id []byte
		var created, due migrations.MySQLTime
		if err := rs.Scan(&id, &r.Topic, &r.Size, &r.Attempt, &created, &due); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if len(id) != 16 {
			return nil, fmt.Errorf("claim: an id of %d bytes", len(id))
		}
		copy(r.ID[:], id)
		r.CreatedAt = store.Time{Time: created.Time, Valid: true}
		r.Due = store.Time{Time: due.Time, Valid: true}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// readRows reads the key, payload and headers of the rows within the
// event bound into them (claim_read.sql).
func (s *mysqlStore) readRows(ctx context.Context, tx *sql.Tx, rows []store.Row) error {
	at := make(map[uuid.UUID]*store.Row, len(rows))
	var ids []uuid.UUID
	for i := range rows {
		if !s.bytes.TooLarge(&rows[i]) {
			at[rows[i].ID] = &rows[i]
			ids = append(ids, rows[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rs, err := tx.QueryContext(ctx, expand(s.q.claimRead, len(ids)), idArgs(ids)...)
	if err != nil {
		return fmt.Errorf("claim: read rows: %w", err)
	}
	defer rs.Close()
	var id []byte
	for rs.Next() {
		var key, payload, headers []byte
		if err := rs.Scan(&id, &key, &payload, &headers); err != nil {
			return fmt.Errorf("claim: read rows: %w", err)
		}
		var r *store.Row
		if len(id) == 16 {
			r = at[uuid.UUID(id)]
		}
		if r == nil {
			return fmt.Errorf("claim: read rows: a row %x it did not lease", id)
		}
		r.Key, r.Payload, r.Headers = key, payload, headers
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("claim: read rows: %w", err)
	}
	return nil
}

// mysqlMinTime is the least DATETIME: the floor of a claim that reads
// every due row.
const mysqlMinTime = "1000-01-01 00:00:00"

// mysqlFloor returns the floor as claim_due.sql's parameters: the time as
// UTC text (a time.Time would be converted to the DSN's loc) and the id.
func mysqlFloor(f store.Floor) (due string, id []byte) {
	due = mysqlMinTime
	if f.Due.Finite() {
		due = f.Due.Time.UTC().Format("2006-01-02 15:04:05.999999")
	}
	if f.Due.Valid && f.Due.Inf > 0 {
		due = "9999-12-31 23:59:59.999999"
	}
	return due, f.ID[:]
}
