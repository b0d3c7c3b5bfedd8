package relay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The statements of the row lifecycle. {{table}} is replaced by the quoted
// table name; everything else is a parameter. Durations are milliseconds so
// that the database clock does all time arithmetic.
const (
	// claimSQL takes up to $1 rows: processing rows whose lease ran out
	// first (their relay died or froze), then due pending rows, oldest first,
	// from the floor ($4, $5) up (floor.go). Each branch uses its own
	// partial index; SKIP LOCKED lets replicas claim side by side without
	// waiting on each other (claimSet says what a claim writes). Rows of
	// ordered topics ($6: all topics, $7: these) that have a key are left to
	// the ordered claim (ordered_store.go). It returns next_retry_at for the
	// next floor.
	claimSQL = `WITH picked AS (
    ` + lapsedBranch + `SELECT id FROM (
        SELECT id
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
          AND (next_retry_at, id) >= ($4, $5)
          ` + orderedFilter + `
        ORDER BY next_retry_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS due
    LIMIT $1
)
UPDATE {{table}} AS o
` + claimSet + `
FROM picked
WHERE o.id = picked.id
RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.created_at, o.next_retry_at`

	// lapsedBranch is claimSQL's first branch: processing rows whose lease
	// ran out. Its scan of processing_idx also reads the entries of every
	// row sent since the last VACUUM, dead, so Run's claims include it only
	// every lapsedEvery (claimDue is claimSQL without it).
	lapsedBranch = `SELECT id FROM (
        SELECT id
        FROM {{table}}
        WHERE status = 'processing'
          AND locked_until < now()
          ` + orderedFilter + `
        ORDER BY locked_until
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS expired
    UNION ALL
    `

	// The write-backs below are fenced: they touch only rows the claim that
	// took them still holds. locked_by is kept as a record of who handled
	// the row last.
	markSentSQL = `UPDATE {{table}}
SET status = 'sent',
    sent_at = now(),
    locked_until = NULL,
    last_error = NULL
WHERE id = ANY($1)
  AND locked_by = $2
  AND status = 'processing'`

	// markRetrySQL puts rows back to pending until a delay has passed. A
	// refund of 1 gives the attempt back: the sink was down, the message
	// was not at fault.
	markRetrySQL = `UPDATE {{table}} AS o
SET status = 'pending',
    next_retry_at = now() + r.delay_ms * interval '1 millisecond',
    attempt = o.attempt - r.refund,
    last_error = r.error,
    locked_until = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[]) AS r(id, delay_ms, error, refund)
WHERE o.id = r.id
  AND o.locked_by = $5
  AND o.status = 'processing'`

	markFailedSQL = `UPDATE {{table}} AS o
SET status = 'failed',
    last_error = r.error,
    locked_until = NULL
FROM unnest($1::uuid[], $2::text[]) AS r(id, error)
WHERE o.id = r.id
  AND o.locked_by = $3
  AND o.status = 'processing'`

	// releaseSQL gives rows back without spending the attempt: they are
	// claimable at once (next_retry_at was already due when claimed).
	releaseSQL = `UPDATE {{table}}
SET status = 'pending',
    attempt = attempt - 1,
    locked_until = NULL
WHERE id = ANY($1)
  AND locked_by = $2
  AND status = 'processing'`

	extendSQL = `UPDATE {{table}}
SET locked_until = now() + $3 * interval '1 millisecond'
WHERE id = ANY($1)
  AND locked_by = $2
  AND status = 'processing'`
)

// claimSet is what both claims (this one and the ordered one) write to a
// claimed row: the claim's token ($2) and lease ($3 ms), and one more
// attempt. The attempt saturates at the integer limit, so that a row whose
// attempt was set there by hand fails (attempt beyond MaxAttempts) instead
// of breaking every claim with "integer out of range".
const claimSet = `SET status = 'processing',
    locked_by = $2,
    locked_until = now() + $3 * interval '1 millisecond',
    attempt = least(o.attempt, 2147483646) + 1`

// orderedFilter keeps rows of ordered topics ($6: all, $7: these) that have
// a key out of the unordered claim.
const orderedFilter = "AND NOT (bucket IS NOT NULL AND ($6::bool OR topic = ANY($7::text[])))"

// row is a claimed outbox row before decoding. createdAt is scanned
// loosely so that a hand-made 'infinity' fails its row, not the claim.
type row struct {
	id        uuid.UUID
	topic     string
	key       []byte
	payload   []byte
	headers   []byte
	attempt   int
	createdAt pgtype.Timestamptz
	tx        int64              // writing transaction; ordered claims only
	due       pgtype.Timestamptz // next_retry_at; unordered lease claims only
}

// retry and failure are write-back requests. A refunded retry gives the
// attempt back.
type retry struct {
	id     uuid.UUID
	delay  time.Duration
	error  string
	refund bool
}

type failure struct {
	id    uuid.UUID
	error string
}

// countDueSQL counts due pending rows, at most $1 of them: it reads no
// more than that many entries of pending_idx.
const countDueSQL = `SELECT count(*) FROM (
    SELECT 1
    FROM {{table}}
    WHERE status = 'pending'
      AND next_retry_at <= now()
    LIMIT $1
) AS due`

// store runs the lifecycle statements for one table. Every statement takes
// the owner token of one claim: it is written to locked_by by the claim and
// fences every later write-back of that claim.
type store struct {
	pool     *pgxpool.Pool
	lease    time.Duration
	ordering Ordering
	sql      map[string]string
}

func newStore(pool *pgxpool.Pool, table outbox.Table, lease time.Duration, ordering Ordering) *store {
	s := &store{pool: pool, lease: lease, ordering: ordering, sql: map[string]string{}}
	for name, q := range map[string]string{
		"claim": claimSQL, "claimDue": strings.Replace(claimSQL, lapsedBranch, "", 1), "sent": markSentSQL, "retry": markRetrySQL,
		"failed": markFailedSQL, "release": releaseSQL, "extend": extendSQL,
		"shardCount": shardCountSQL, "shardCreate": shardCreateSQL, "leaseShard": leaseShardSQL,
		"handBack": handBackSQL, "extendShard": extendShardSQL, "claimOrdered": claimOrderedSQL,
		"claimJob": claimJobSQL, "deleteSent": deleteSentSQL, "recordBatch": recordBatchSQL, "finishJob": finishJobSQL,
		"mayVacuum": mayVacuumSQL, "vacuum": vacuumSQL, "countDue": countDueSQL,
		"claimLocked": claimLockedSQL, "lockedSent": lockedSentSQL, "lockedRetry": lockedRetrySQL, "lockedFailed": lockedFailedSQL,
	} {
		q = strings.ReplaceAll(q, "{{shards}}", table.Related("shards"))
		q = strings.ReplaceAll(q, "{{jobs}}", table.Related("jobs"))
		if ordering.allTopics() {
			// Every keyed row is ordered: say so in a form the keyless
			// partial index matches.
			q = strings.ReplaceAll(q, orderedFilter, "AND bucket IS NULL")
			q = strings.ReplaceAll(q, orderedFilterLocked, "AND bucket IS NULL")
		}
		s.sql[name] = strings.ReplaceAll(q, "{{table}}", table.Ident())
	}
	// A lock claim's transaction: the server ends a session idle this long
	// in it, which is the claim's lease, and its statements are planned as
	// ConfigurePool's would be (lock.go).
	s.sql["lockSettings"] = localSettings(pool.Config().ConnConfig.RuntimeParams,
		map[string]string{"idle_in_transaction_session_timeout": fmt.Sprint(lease.Milliseconds())})
	return s
}

// orderedTopics returns the claim parameters naming the ordered topics.
func (s *store) orderedTopics() (all bool, topics []string) {
	topics = []string{}
	for _, t := range s.ordering.Topics {
		if t != "*" {
			topics = append(topics, t)
		}
	}
	return s.ordering.allTopics(), topics
}

// claimArgs are the claim statement's parameters.
func (s *store) claimArgs(owner string, limit int, floor floor) []any {
	args := []any{limit, owner, s.lease.Milliseconds(), floor.due, floor.id}
	if all, topics := s.orderedTopics(); !all { // with all topics ordered the filter takes no parameters
		args = append(args, all, topics)
	}
	return args
}

// claim takes up to limit unordered rows and leases them to owner: pending
// rows from floor up, and lapsed leases when lapsed (claimDue
// otherwise). In the same transaction and round trip it marks the riders'
// rows sent: fenced[i] counts the rows of riders[i] that another claim
// held by then. On an error nothing is written.
func (s *store) claim(ctx context.Context, owner string, limit int, lapsed bool, floor floor, riders []rider) (rows []row, fenced []int, err error) {
	name := "claim"
	if !lapsed {
		name = "claimDue"
	}
	b := &pgx.Batch{}
	for _, rd := range riders {
		b.Queue(s.sql["sent"], pgIDs(rd.ids), rd.owner)
	}
	b.Queue(s.sql[name], s.claimArgs(owner, limit, floor)...)
	// A batch runs in one implicit transaction, committed after its last
	// statement: Close reports a failure of any of them.
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			rows, fenced, err = nil, nil, fmt.Errorf("claim: %w", cerr)
		}
	}()
	fenced = make([]int, len(riders))
	for i, rd := range riders {
		tag, err := br.Exec()
		if err != nil {
			return nil, nil, fmt.Errorf("claim: mark sent: %w", err)
		}
		fenced[i] = len(rd.ids) - int(tag.RowsAffected())
	}
	q, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	rows, err = collectRows(q, withDue)
	if err != nil {
		return nil, nil, err
	}
	return rows, fenced, nil
}

// What a claim returns after the columns every claim does.
const (
	noExtra = iota // lock claims
	withTx         // ordered claims: the writing transaction
	withDue        // unordered lease claims: next_retry_at, for the floor
)

// collectRows reads claimed rows and the extra column (withTx, withDue)
// the claim returns.
func collectRows(rows pgx.Rows, extra int) ([]row, error) {
	claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		// The id as [16]byte: pgx decodes that from binary, whereas
		// uuid.UUID, a sql.Scanner, would go through text.
		dest := []any{(*[16]byte)(&x.id), &x.topic, &x.key, &x.payload, &x.headers, &x.attempt, &x.createdAt}
		switch extra {
		case withTx:
			dest = append(dest, &x.tx)
		case withDue:
			dest = append(dest, &x.due)
		}
		err := r.Scan(dest...)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return claimed, nil
}

// The write-backs return how many of the rows were fenced out: no longer
// held by this claim, so left untouched.

// pgIDs returns ids as pgx sends them in binary. uuid.UUID is a
// driver.Valuer, which pgx honours by formatting every id as text for the
// server to parse back: that took a quarter of the relay's CPU in a
// burn-down (docs/benchmarks.md#where-the-time-goes).
func pgIDs(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

func (s *store) markSent(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	return s.exec(ctx, "sent", len(ids), pgIDs(ids), owner)
}

func (s *store) markRetry(ctx context.Context, owner string, rs []retry) (fenced int, err error) {
	ids, delays, errs, refunds := retryColumns(rs)
	return s.exec(ctx, "retry", len(rs), ids, delays, errs, refunds, owner)
}

func (s *store) markFailed(ctx context.Context, owner string, fs []failure) (fenced int, err error) {
	ids, errs := failureColumns(fs)
	return s.exec(ctx, "failed", len(fs), ids, errs, owner)
}

// retryColumns returns retries as the arrays the retry statements unnest.
func retryColumns(rs []retry) (ids [][16]byte, delays []int64, errs []string, refunds []int32) {
	ids, delays, errs, refunds = make([][16]byte, len(rs)), make([]int64, len(rs)), make([]string, len(rs)), make([]int32, len(rs))
	for i, r := range rs {
		ids[i], delays[i], errs[i] = r.id, r.delay.Milliseconds(), r.error
		if r.refund {
			refunds[i] = 1
		}
	}
	return ids, delays, errs, refunds
}

// failureColumns returns failures as the arrays the failed statements
// unnest.
func failureColumns(fs []failure) (ids [][16]byte, errs []string) {
	ids, errs = make([][16]byte, len(fs)), make([]string, len(fs))
	for i, f := range fs {
		ids[i], errs[i] = f.id, f.error
	}
	return ids, errs
}

func (s *store) release(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	return s.exec(ctx, "release", len(ids), pgIDs(ids), owner)
}

func (s *store) extend(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	return s.exec(ctx, "extend", len(ids), pgIDs(ids), owner, s.lease.Milliseconds())
}

// countDue returns the number of due pending rows, or limit when there are
// at least that many.
func (s *store) countDue(ctx context.Context, limit int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, s.sql["countDue"], limit).Scan(&n)
	return n, err
}

// exec runs a fenced statement over n rows; it does nothing when n is 0.
func (s *store) exec(ctx context.Context, name string, n int, args ...any) (int, error) {
	if n == 0 {
		return 0, nil
	}
	var tag pgconn.CommandTag
	tag, err := s.pool.Exec(ctx, s.sql[name], args...)
	if err != nil {
		return 0, fmt.Errorf("mark %s: %w", name, err)
	}
	return n - int(tag.RowsAffected()), nil
}
