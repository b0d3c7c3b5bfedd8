package mysqlstore

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

// Store runs the relay's statements for one table on a database/sql pool.
type Store struct {
	db     *sql.DB
	table  outbox.Table
	lease  time.Duration
	bounds store.Bounds
	q      statements
	// all and topics name the ordered topics (every one, or those of the
	// JSON array); shards is the shard count.
	all    bool
	topics string
	shards int
}

var _ store.Store = (*Store)(nil)

// Config is what the store needs of the relay's configuration.
type Config struct {
	// Table is the outbox table; an empty Schema means the connection's
	// database (migrations.MySQLIdent).
	Table outbox.Table
	// Lease is how long a claim or a job run holds its rows or its job.
	Lease time.Duration
	// Bounds bound what a claim reads.
	Bounds store.Bounds
	// Topics are the ordered topics ("*": every one; none: ordering off),
	// whose keyed rows the unordered claim leaves to the ordered one.
	Topics []string
	// Shards is the number of shards of ordered delivery.
	Shards int
}

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the texts of the MySQL statements for one table,
// each named for its file in sql/.
type statements struct {
	claimSwept, claimLapsed, claimDue, claimLease, claimRead   string
	markSent, markRetry, markFailed, release, extend, countDue string
	backlog, backlogEstimate                                   string
	claimJob, pickSent, deleteSent, recordBatch, finishJob     string
	lookBelow                                                  string

	// Ordered delivery's (ordered.go).
	orderedRead, orderedProcessing, orderedWork, orderedTake     string
	recordOrdered, recordOrderedRetried, recordOrderedFailed     string
	recordOrderedShard, shardFree, shardLock, shardCountAttempt  string
	shardLease, shardHeld, shardTake, shardHandBack, shardExtend string
	shardCount, shardCreate, dueKeyless                          string
}

// loadStatements reads the MySQL statements for table. read records
// each file it reads, for the test that every file is used.
func loadStatements(table outbox.Table, read func(file string)) statements {
	names := strings.NewReplacer("{{table}}", migrations.MySQLIdent(table), "{{jobs}}", migrations.MySQLRelated(table, "jobs"),
		"{{shards}}", migrations.MySQLRelated(table, "shard_ranges"))
	file := func(name string) string {
		if read != nil {
			read(name)
		}
		b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
		if err != nil {
			panic(err) // embedded: a missing file is a build mistake
		}
		return names.Replace(store.StripComments(string(b)))
	}
	return statements{
		claimSwept: file("claim_swept"), claimLapsed: file("claim_lapsed"), claimDue: file("claim_due"), claimLease: file("claim_lease"),
		claimRead: file("claim_read"), markSent: file("mark_sent"), markRetry: file("mark_retry"), markFailed: file("mark_failed"),
		release: file("release"), extend: file("extend"), countDue: file("count_due"),
		backlog: file("backlog"), backlogEstimate: file("backlog_estimate"),
		claimJob: file("claim_job"), pickSent: file("pick_sent"), deleteSent: file("delete_sent"),
		recordBatch: file("record_batch"), finishJob: file("finish_job"),
		lookBelow:   file("look_below"),
		orderedRead: file("ordered_read"), orderedProcessing: file("ordered_processing"), orderedWork: file("ordered_work"),
		orderedTake: file("ordered_take"), recordOrdered: file("record_ordered"), recordOrderedRetried: file("record_ordered_retried"),
		recordOrderedFailed: file("record_ordered_failed"), recordOrderedShard: file("record_ordered_shard"),
		shardFree: file("shard_free"), shardLock: file("shard_lock"), shardCountAttempt: file("shard_count_attempt"),
		shardLease: file("shard_lease"), shardHeld: file("shard_held"), shardTake: file("shard_take"),
		shardHandBack: file("shard_hand_back"), shardExtend: file("shard_extend"), shardCount: file("shard_count"),
		shardCreate: file("shard_create"), dueKeyless: file("due_keyless"),
	}
}

// New returns the store of cfg.Table on db.
func New(db *sql.DB, cfg Config) *Store {
	all, topics := orderedTopics(cfg.Topics)
	return &Store{db: db, table: cfg.Table, lease: cfg.Lease, bounds: cfg.Bounds, q: loadStatements(cfg.Table, nil),
		all: all, topics: topics, shards: cfg.Shards}
}

// Ready checks that the database answers, that the server is one the
// relay supports, and that the table's schema is the one this relay needs.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return err
	}
	return migrations.CheckMySQL(ctx, s.db, s.table)
}

// Fatal reports MySQL errors that retrying cannot fix: a missing or
// newer schema, an unsupported server, an invalid name, and server answers
// about access, unknown databases or tables, and syntax.
func (s *Store) Fatal(err error) bool {
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

// Claim takes up to limit rows and leases them to owner, as
// store.Store.Claim does: the rows of rg.Swept that are still due pending
// rows or lapsed leases, then, when rg.Lapsed, rows whose lease ran out
// (within rg.LapsedWithin before now, when that is set), then due pending
// rows from rg.From up. In the same transaction, first, it marks the rows
// of earlier claims in sent sent: fenced[i] counts the rows of sent[i]
// that another claim held by then. On an error nothing is written.
//
// Each part is a statement of its own in one transaction (PostgreSQL
// reads the three in one UNION ALL); a row two parts both find, which
// SKIP LOCKED does not skip since this transaction holds it, is taken
// once. The parts return each row's size, not its payload, key and
// headers: the claim keeps rows up to the one at which their sizes reach
// s.bounds.Batch, as PostgreSQL's claim.sql does, leases them, and then
// reads those of them within s.bounds.Event (claim_read.sql).
func (s *Store) Claim(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) (rows []store.Row, fenced []int, err error) {
	err = onDeadlock(func() error {
		var err error
		rows, fenced, err = s.claimOnce(ctx, owner, limit, rg, sent)
		return err
	})
	return rows, fenced, err
}

// claimOnce is one attempt of claim.
func (s *Store) claimOnce(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) (rows []store.Row, fenced []int, err error) {
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
	bytes := 0 // the rows' sizes so far, as store.Bounds.RowBytes counts them
	room := func() bool { return len(rows) < limit && bytes < s.bounds.Batch }
	pick := func(q string, args ...any) error {
		got, err := s.lockRows(ctx, tx, q, args...)
		if err != nil {
			return err
		}
		for _, r := range got {
			if !seen[r.ID] && room() {
				seen[r.ID] = true
				rows = append(rows, r)
				if !s.bounds.TooLarge(&r) {
					bytes += int(r.Size)
				}
			}
		}
		return nil
	}
	if len(rg.Swept) > 0 {
		if err := pick(expand(s.q.claimSwept, len(rg.Swept)), append(idArgs(rg.Swept), s.all, s.topics, limit)...); err != nil {
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
		due, id := floorArgs(rg.From)
		if err := pick(s.q.claimDue, s.all, s.topics, due, due, id, limit-len(rows)); err != nil {
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
func (s *Store) lockRows(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]store.Row, error) {
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
func (s *Store) readRows(ctx context.Context, tx *sql.Tx, rows []store.Row) error {
	at := make(map[uuid.UUID]*store.Row, len(rows))
	var ids []uuid.UUID
	for i := range rows {
		if !s.bounds.TooLarge(&rows[i]) {
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

// minTime is the least DATETIME: the floor of a claim that reads
// every due row.
const minTime = "1000-01-01 00:00:00"

// floorArgs returns the floor as claim_due.sql's parameters: the time as
// UTC text (a time.Time would be converted to the DSN's loc) and the id.
func floorArgs(f store.Floor) (due string, id []byte) {
	due = minTime
	if f.Due.Finite() {
		due = f.Due.Time.UTC().Format("2006-01-02 15:04:05.999999")
	}
	if f.Due.Valid && f.Due.Inf > 0 {
		due = "9999-12-31 23:59:59.999999"
	}
	return due, f.ID[:]
}
