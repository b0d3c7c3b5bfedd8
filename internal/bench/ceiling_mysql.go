package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The SQL-only ceiling on MySQL and MariaDB runs the relay's own lease
// lifecycle (relay/internal/mysqlstore), statement for statement: the texts
// below are those of its sql/claim_due.sql, claim_lease.sql,
// claim_read.sql and mark_sent.sql without their comments (a test
// compares them with the files). {{table}} is the quoted table; {{ids}} becomes one placeholder
// per row, as in the relay.
const (
	mysqlCeilingClaimSQL = `SELECT id, topic,
       LENGTH(payload) + COALESCE(LENGTH(` + "`key`" + `), 0) + LENGTH(headers) AS size,
       LEAST(attempt, 2147483646) + 1 AS attempt, created_at, next_retry_at
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'pending'
  AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT (seq IS NOT NULL AND (? OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p)))
  AND (next_retry_at > ? OR (next_retry_at = ? AND id >= ?))
ORDER BY next_retry_at, id
LIMIT ?
FOR UPDATE SKIP LOCKED`

	mysqlCeilingLeaseSQL = `UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'processing',
    locked_by = ?,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    attempt = LEAST(attempt, 2147483646) + 1
WHERE id IN ({{ids}})`

	mysqlCeilingReadSQL = "SELECT id, `key`, payload, headers\n" +
		`FROM {{table}} FORCE INDEX (PRIMARY)
WHERE id IN ({{ids}})`

	mysqlCeilingMarkSentSQL = `UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'sent',
    sent_at = UTC_TIMESTAMP(6),
    locked_until = NULL,
    last_error = NULL
WHERE id IN ({{ids}})
  AND locked_by = ?
  AND status = 'processing'`

	// mysqlCeilingFloor is the claim's floor when it reads every due row
	// (the relay's mysqlMinTime and the zero id).
	mysqlCeilingFloor = "1000-01-01 00:00:00"

	// mysqlCeilingLeaseMS is the lease the claims write: relay.Config's
	// default of 30s.
	mysqlCeilingLeaseMS = 30_000

	// mysqlFillTable holds the ceiling's rows, written once by the
	// Writer; each lifecycle starts from a copy of them.
	mysqlFillTable = "outbox_fill"
)

// LifecycleMarkSentInClaim is the second lifecycle of the MySQL ceiling,
// as in CeilingResult.Lifecycle: the mark-sent UPDATE of a batch runs at
// the start of the next claim's transaction, one commit per batch, which
// is what the relay does with batches under 500 rows
// (relay/sent_batching.go). On MySQL, LifecycleMarkSent is a claim
// transaction (READ COMMITTED: SELECT ... FOR UPDATE SKIP LOCKED, the
// lease UPDATE, COMMIT) and then the mark-sent UPDATE as a transaction of
// its own, which is what the relay does with batches of 500 rows or more,
// the default 1,000 included.
const LifecycleMarkSentInClaim = "mark_sent_in_claim"

// mysqlLifecycles are the lifecycles the MySQL ceiling measures: whether
// the mark-sent runs in the next claim's transaction.
var mysqlLifecycles = []struct {
	name    string
	inClaim bool
}{
	{LifecycleMarkSent, false},
	{LifecycleMarkSentInClaim, true},
}

// expandIDs writes n placeholders for {{ids}}, as the relay's expand does.
func expandIDs(q string, n int) string {
	return strings.Replace(q, "{{ids}}", strings.TrimSuffix(strings.Repeat("?, ", n), ", "), 1)
}

// runMySQLCeiling measures every MySQL lifecycle with every client count
// of cfg on an outbox table migrated in the database cfg.Schema +
// "_ceiling", which it drops at the end. Each client has a connection of
// its own, made before the clock starts, and loops claim and mark-sent
// for ceilingIterations batches of cfg.BatchSize.
func runMySQLCeiling(ctx context.Context, cfg Config, db *sql.DB) ([]CeilingResult, error) {
	name := cfg.Schema + ceilingSuffix
	table, err := prepareMySQLOutbox(ctx, db, name)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	defer dropMySQLDatabase(context.WithoutCancel(ctx), db, name) //nolint:errcheck // best effort
	fill := outbox.Table{Schema: name, Name: mysqlFillTable}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+migrations.MySQLIdent(fill)+" LIKE "+migrations.MySQLIdent(table)); err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "ceiling: writing %d rows\n", cfg.CeilingRows)
	if _, err := prewriteMySQL(ctx, db, fill, "orders", cfg.CeilingRows, cfg.PayloadBytes); err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	var out []CeilingResult
	for _, clients := range cfg.CeilingClients {
		for _, lc := range mysqlLifecycles {
			if err := refillMySQLCeiling(ctx, db, table, fill); err != nil {
				return out, err
			}
			res, err := measureMySQLCeiling(ctx, cfg, db, table, lc.name, lc.inClaim, clients)
			if err != nil {
				return out, err
			}
			fmt.Fprintf(cfg.Progress, "ceiling: %s clients=%d %.0f events/s\n", lc.name, clients, res.EventsPerSecond)
			out = append(out, res)
		}
	}
	return out, nil
}

// refillMySQLCeiling empties the table and copies the rows of fill into
// it, all pending.
func refillMySQLCeiling(ctx context.Context, db *sql.DB, table, fill outbox.Table) error {
	for _, q := range []string{
		"TRUNCATE TABLE " + migrations.MySQLIdent(table),
		"INSERT INTO " + migrations.MySQLIdent(table) + " SELECT * FROM " + migrations.MySQLIdent(fill),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("ceiling: fill: %w", err)
		}
	}
	return analyzeMySQL(ctx, db, table)
}

// measureMySQLCeiling runs one lifecycle with clients connections.
func measureMySQLCeiling(ctx context.Context, cfg Config, db *sql.DB, table outbox.Table, lifecycle string, inClaim bool, clients int) (CeilingResult, error) {
	db.SetMaxOpenConns(max(clients+1, cfg.Writers+4))
	conns := make([]*sql.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range clients {
		c, err := db.Conn(ctx)
		if err != nil {
			return CeilingResult{}, fmt.Errorf("ceiling: connect: %w", err)
		}
		conns = append(conns, c)
	}
	l := mysqlCeilingLoop{
		claim:    mysqlSQL(mysqlCeilingClaimSQL, table),
		lease:    mysqlSQL(mysqlCeilingLeaseSQL, table),
		read:     mysqlSQL(mysqlCeilingReadSQL, table),
		markSent: mysqlSQL(mysqlCeilingMarkSentSQL, table),
		batch:    cfg.BatchSize,
		inClaim:  inClaim,
	}
	n := ceilingIterations(cfg.CeilingRows, cfg.BatchSize, clients)
	claimed := make([]int, clients)
	errs := make([]error, clients)
	phases := make([]phaseTimes, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			claimed[i], errs[i] = l.run(ctx, c, fmt.Sprintf("w%d", i+1), n, &phases[i])
		}()
	}
	began, cpu := time.Now(), hostReading()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	res := CeilingResult{Lifecycle: lifecycle, Clients: clients, Rows: cfg.CeilingRows, Batch: cfg.BatchSize, Seconds: elapsed.Seconds(),
		HostCPUBusy: hostBusyBetween(cpu, hostReading())}
	for i := range conns {
		if errs[i] != nil {
			return res, fmt.Errorf("ceiling %s: %w", lifecycle, errs[i])
		}
		res.Events += claimed[i]
	}
	res.EventsPerSecond = float64(res.Events) / elapsed.Seconds()
	timing := func(name string) PhaseTiming {
		var all []float64
		total := 0.0
		for i := range phases {
			for _, d := range phases[i].ms[name] {
				all = append(all, d)
				total += d
			}
		}
		return PhaseTiming{MS: percentilesOf(all), Share: total / 1000 / (elapsed.Seconds() * float64(clients))}
	}
	res.Phases = &CeilingPhases{Lock: timing("lock"), Lease: timing("lease"), Read: timing("read"), Commit: timing("commit"), MarkSent: timing("mark_sent")}
	return res, nil
}

// phaseTimes are one client's durations of each step, in ms.
type phaseTimes struct{ ms map[string][]float64 }

// since records the time from t to now as one step of name and returns
// now.
func (p *phaseTimes) since(name string, t time.Time) time.Time {
	now := time.Now()
	if p.ms == nil {
		p.ms = map[string][]float64{}
	}
	p.ms[name] = append(p.ms[name], ms(now.Sub(t)))
	return now
}

// mysqlCeilingLoop is one client of the MySQL ceiling: the relay's
// statements for one table and batch size.
type mysqlCeilingLoop struct {
	claim, lease, read, markSent string
	batch                        int
	inClaim                      bool
}

// mysqlClaimTx is the isolation of the relay's claim transaction.
var mysqlClaimTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// run claims n batches on c, each under a token of its own (owner-<i>),
// marks each sent, and returns the rows claimed. With inClaim, a batch is
// marked sent in the next claim's transaction, and the last one on its
// own.
func (l mysqlCeilingLoop) run(ctx context.Context, c *sql.Conn, owner string, n int, p *phaseTimes) (int, error) {
	total := 0
	var held []any // the last batch's ids, then its token: mark-sent's parameters
	for i := range n {
		t := time.Now()
		tx, err := c.BeginTx(ctx, mysqlClaimTx)
		if err != nil {
			return total, err
		}
		if l.inClaim && len(held) > 0 {
			if err := l.exec(ctx, tx, l.markSent, len(held)-1, held); err != nil {
				_ = tx.Rollback()
				return total, err
			}
			t = p.since("mark_sent", t)
		}
		token := fmt.Sprintf("%s-%d", owner, i)
		ids, err := l.lock(ctx, tx)
		t = p.since("lock", t)
		if err == nil && len(ids) > 0 {
			err = l.exec(ctx, tx, l.lease, len(ids), append([]any{token, mysqlCeilingLeaseMS}, ids...))
			t = p.since("lease", t)
		}
		if err == nil && len(ids) > 0 {
			err = l.readRows(ctx, tx, ids)
			t = p.since("read", t)
		}
		if err != nil {
			_ = tx.Rollback()
			return total, err
		}
		if err := tx.Commit(); err != nil {
			return total, err
		}
		t = p.since("commit", t)
		total += len(ids)
		held = nil
		if len(ids) > 0 {
			held = append(ids, token)
		}
		if !l.inClaim && len(held) > 0 {
			if err := l.exec(ctx, c, l.markSent, len(held)-1, held); err != nil {
				return total, err
			}
			p.since("mark_sent", t)
			held = nil
		}
	}
	if len(held) > 0 {
		return total, l.exec(ctx, c, l.markSent, len(held)-1, held)
	}
	return total, nil
}

// lock runs the claim's SELECT ... FOR UPDATE SKIP LOCKED and reads its
// rows' sizes, as the relay does; it returns their ids.
func (l mysqlCeilingLoop) lock(ctx context.Context, tx *sql.Tx) ([]any, error) {
	// No ordered topics, as the relay's burn-down runs.
	rows, err := tx.QueryContext(ctx, l.claim, false, "[]", mysqlCeilingFloor, mysqlCeilingFloor, make([]byte, 16), l.batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id []byte
		var topic string
		var size int64
		var attempt int
		var created, due migrations.MySQLTime
		if err := rows.Scan(&id, &topic, &size, &attempt, &created, &due); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// readRows reads the key, payload and headers of the rows ids, as the
// relay does once it leased them.
func (l mysqlCeilingLoop) readRows(ctx context.Context, tx *sql.Tx, ids []any) error {
	rows, err := tx.QueryContext(ctx, expandIDs(l.read, len(ids)), ids...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, key, payload, headers []byte
		if err := rows.Scan(&id, &key, &payload, &headers); err != nil {
			return err
		}
	}
	return rows.Err()
}

// exec runs a statement whose {{ids}} list has n ids, with args.
func (l mysqlCeilingLoop) exec(ctx context.Context, e execer, q string, n int, args []any) error {
	_, err := e.ExecContext(ctx, expandIDs(q, n), args...)
	return err
}

// execer is *sql.Conn or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
