package relay

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// pgStore is every statement the relay runs against PostgreSQL, and the
// only part of the relay that knows it talks to PostgreSQL. Each statement
// is a file in sql/postgres, with one fixed parameter list whatever the
// configuration; {{table}}, {{shards}} and {{jobs}} name the outbox table
// and its related tables. Durations are milliseconds, so that the database
// clock does all time arithmetic. Every write-back is fenced by the token
// of the claim that took the rows: it is written to locked_by by the claim,
// and a write-back touches only rows whose locked_by is still its own.

//go:embed sql/postgres/*.sql
var postgresSQL embed.FS

// statements are the texts of the relay's statements for one table, each
// named for its file in sql/postgres.
type statements struct {
	// claim is claim.sql, for a plain table; claimPartitioned is its form
	// for a partitioned table (pgStore.claimStatement).
	claim, claimPartitioned                                    string
	markSent, markRetry, markFailed, release, extend, countDue string
	// markSentByTID is markSent by the tuple ids a claim returned
	// (pgStore.markSent).
	markSentByTID                                              string
	claimLocked, lockedSent, lockedRetry, lockedFailed         string
	shardCount, shardCreate, leaseShard, handBack, extendShard string
	// The ordered claim's steps (store_ordered_claim.go) and write-back.
	orderedHead, orderedBuckets, orderedTake, recordOrdered, recordOrderedRetried string
	claimJob, deleteSent, recordBatch, finishJob, mayVacuum, vacuum               string
	backlog, backlogEstimate                                                      string
	dueKeyless                                                                    string
	lookBelow                                                                     string
}

// loadStatements reads the statements for table. read records each file
// it reads, for the test that every file is used.
func loadStatements(table outbox.Table, read func(file string)) statements {
	names := strings.NewReplacer("{{table}}", table.Ident(), "{{shards}}", table.Related("shard_ranges"), "{{jobs}}", table.Related("jobs"))
	raw := func(name string) string {
		if read != nil {
			read(name)
		}
		b, err := postgresSQL.ReadFile("sql/postgres/" + name + ".sql")
		if err != nil {
			panic(err) // embedded: a missing file is a build mistake
		}
		return string(b)
	}
	text := func(q string) string { return names.Replace(stripComments(q)) }
	file := func(name string) string { return text(raw(name)) }
	claim := file("claim")
	return statements{
		claim: claim, claimPartitioned: byPrimaryKey(claim),
		markSent: file("mark_sent"), markSentByTID: file("mark_sent_by_tid"), markRetry: file("mark_retry"), markFailed: file("mark_failed"),
		release: file("release"), extend: file("extend"), countDue: file("count_due"),
		claimLocked: file("claim_locked"), lockedSent: file("locked_sent"), lockedRetry: file("locked_retry"), lockedFailed: file("locked_failed"),
		shardCount: file("shard_count"), shardCreate: file("shard_create"), leaseShard: file("lease_shard"),
		handBack: file("hand_back"), extendShard: file("extend_shard"),
		orderedHead: file("ordered_head"), orderedBuckets: file("ordered_buckets"), orderedTake: file("ordered_take"),
		recordOrdered: file("record_ordered"), recordOrderedRetried: file("record_ordered_retried"),
		claimJob: file("claim_job"), deleteSent: file("delete_sent"), recordBatch: file("record_batch"),
		finishJob: file("finish_job"), mayVacuum: file("may_vacuum"), vacuum: file("vacuum"),
		backlog: file("backlog"), backlogEstimate: file("backlog_estimate"), dueKeyless: file("due_keyless"),
		lookBelow: file("look_below"),
	}
}

// byPrimaryKey turns claim.sql, which updates the rows it picked by tuple
// id, into the claim for a partitioned table, which joins them by primary
// key and returns no tuple ids: a tuple id names a row in each partition.
func byPrimaryKey(claim string) string {
	const (
		update    = "UPDATE ONLY "
		byTID     = "WHERE o.ctid = ANY (ARRAY(SELECT ctid FROM taken))"
		returnTID = "o.next_retry_at, o.ctid"
	)
	if strings.Count(claim, update) != 1 || strings.Count(claim, byTID) != 1 || strings.Count(claim, returnTID) != 1 {
		panic("relay: claim.sql lost its update by tuple id") // embedded: a build mistake
	}
	return strings.NewReplacer(update, "UPDATE ", byTID, "FROM taken\n    WHERE o.id = taken.id\n      AND ($11::uuid IS NULL OR o.id >= $11)",
		returnTID, "o.next_retry_at, NULL::tid").Replace(claim)
}

// stripComments drops the lines that are only a comment: the files'
// explanations need not travel with every statement.
func stripComments(q string) string {
	var b strings.Builder
	for line := range strings.Lines(q) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return strings.TrimSpace(b.String())
}

// pgStore runs the relay's statements for one table on a pool.
type pgStore struct {
	pool     *pgxpool.Pool
	table    outbox.Table
	lease    time.Duration
	ordering Ordering
	q        statements
	// bytes bound what a claim reads.
	bytes store.Bounds
	// lockSettings opens a lock claim's transaction (store_lock.go).
	lockSettings string
	// shape caches whether the table is partitioned (isPartitioned).
	shape atomic.Pointer[bool]
}

// isPartitioned reports whether the table is partitioned. It looks the
// table up once: a table is created partitioned or not and stays so.
func (s *pgStore) isPartitioned(ctx context.Context) (bool, error) {
	if p := s.shape.Load(); p != nil {
		return *p, nil
	}
	partitioned, err := migrations.IsPartitioned(ctx, s.pool, s.table)
	if err != nil {
		return false, err
	}
	s.shape.Store(&partitioned)
	return partitioned, nil
}

// claimStatement returns the lease claim for the table: q.claim, which
// updates the rows it picked by tuple id, on a plain table, and
// q.claimPartitioned on a partitioned one (claim.sql).
func (s *pgStore) claimStatement(ctx context.Context) (string, error) {
	partitioned, err := s.isPartitioned(ctx)
	switch {
	case err != nil:
		return "", err
	case partitioned:
		return s.q.claimPartitioned, nil
	default:
		return s.q.claim, nil
	}
}

func newPGStore(pool *pgxpool.Pool, table outbox.Table, lease time.Duration, ordering Ordering, bytes store.Bounds) *pgStore {
	return &pgStore{
		pool: pool, table: table, lease: lease, ordering: ordering, bytes: bytes,
		q: loadStatements(table, nil),
		// The server ends a session idle this long in a lock claim's
		// transaction, which is the claim's lease, and its statements are
		// planned as ConfigurePool's would be.
		lockSettings: localSettings(pool.Config().ConnConfig.RuntimeParams,
			map[string]string{"idle_in_transaction_session_timeout": fmt.Sprint(lease.Milliseconds())}),
	}
}

// Ready checks that the database answers and the table's schema is the
// one this relay needs.
func (s *pgStore) Ready(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return err
	}
	return migrations.Check(ctx, s.pool, s.table)
}

// Fatal reports errors that retrying cannot fix: a missing or newer schema,
// an invalid name, and server answers about access or authentication.
func (s *pgStore) Fatal(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		class := pgErr.Code[:2]
		return class == "28" || class == "42" || class == "3D" || class == "3F"
	}
	return errors.Is(err, migrations.ErrNotMigrated) || errors.Is(err, migrations.ErrSchemaTooNew) ||
		errors.Is(err, outbox.ErrInvalidIdentifier)
}

// Listen connects outside the pool, LISTENs on the table's channel
// (migration 003) and calls notified for every notification, until the
// connection fails or ctx ends; connected runs once the LISTEN took effect.
func (s *pgStore) Listen(ctx context.Context, connected, notified func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.table.Channel()}.Sanitize()); err != nil {
		return err
	}
	connected()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		notified()
	}
}

// orderedTopics returns the parameters naming the ordered topics: all of
// them, or these.
func (s *pgStore) orderedTopics() (all bool, topics []string) {
	topics = []string{}
	for _, t := range s.ordering.Topics {
		if t != "*" {
			topics = append(topics, t)
		}
	}
	return s.ordering.allTopics(), topics
}

// DueKeyless reports whether a keyless row is due or a lease has lapsed:
// when every topic is ordered, whether the unordered claim may find a row
// (due_keyless.sql).
func (s *pgStore) DueKeyless(ctx context.Context) (bool, error) {
	var due bool
	if err := s.pool.QueryRow(ctx, s.q.dueKeyless).Scan(&due); err != nil {
		return false, fmt.Errorf("look for due keyless rows: %w", err)
	}
	return due, nil
}

// Claim takes up to limit unordered rows, within s.bytes, and leases them
// to owner: the rows of rg.swept that are still due pending rows or
// lapsed leases, then, when rg.lapsed, rows whose lease ran out (within
// rg.lapsedWithin before now, when that is set), then pending rows from
// rg.from up. In
// the same transaction and round trip it marks the rows of earlier claims
// in sent sent (sent_batching.go): fenced[i] counts the rows of sent[i]
// that another claim held by then. On an error nothing is written.
func (s *pgStore) Claim(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) (rows []store.Row, fenced []int, err error) {
	claim, err := s.claimStatement(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	all, topics := s.orderedTopics()
	b := &pgx.Batch{}
	for _, sb := range sent {
		q, args := s.markSentArgs(sb.Owner, sb.IDs, sb.TIDs)
		b.Queue(q, args...)
	}
	var lapsedWithin *int64 // every lapsed lease
	if rg.LapsedWithin > 0 {
		ms := rg.LapsedWithin.Milliseconds()
		lapsedWithin = &ms
	}
	bound, err := s.claimBound(ctx, rg.From)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	if bound != nil && len(rg.Swept) > 0 {
		// The rows a look found may lie below it: the update must reach
		// their partitions.
		lo, _ := idRange(rg.Swept)
		if bytes.Compare(lo[:], bound[:]) < 0 {
			bound = &lo
		}
	}
	b.Queue(claim, limit, owner, s.lease.Milliseconds(), pgTime(rg.From.Due), rg.From.ID, all, topics, rg.Lapsed, lapsedWithin, rg.Swept, bound,
		s.bytes.Batch, s.bytes.Event)
	// A batch runs in one implicit transaction, committed after its last
	// statement: Close reports a failure of any of them.
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			rows, fenced, err = nil, nil, fmt.Errorf("claim: %w", cerr)
		}
	}()
	fenced = make([]int, len(sent))
	for i, sb := range sent {
		tag, err := br.Exec()
		if err != nil {
			return nil, nil, fmt.Errorf("claim: mark sent: %w", err)
		}
		fenced[i] = len(sb.IDs) - int(tag.RowsAffected())
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

// LookBelow returns what a sweep would take, without locking anything:
// up to limit lapsed leases, oldest first, up to limit due pending rows
// below from, lowest first, and on a partitioned table up to limit due
// pending rows below the claims' id bound (look_below.sql, claimBound).
// full reports whether any branch found limit rows: more may wait behind
// them.
func (s *pgStore) LookBelow(ctx context.Context, from store.Floor, limit int) (ids [][16]byte, full bool, err error) {
	all, topics := s.orderedTopics()
	bound, err := s.claimBound(ctx, from)
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	rows, err := s.pool.Query(ctx, s.q.lookBelow, limit, pgTime(from.Due), from.ID, all, topics, bound)
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	var found [3]int
	var id [16]byte
	var branch int32
	_, err = pgx.ForEachRow(rows, []any{&id, &branch}, func() error {
		if branch < 0 || int(branch) >= len(found) {
			return fmt.Errorf("branch %d of look_below.sql", branch)
		}
		ids = append(ids, id)
		found[branch]++
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	return ids, slices.Max(found[:]) >= limit, nil
}

// claimBoundMargin is how far before the floor's time the claims' id
// bound lies: an id is made by the writer's clock, a row's next_retry_at
// by the database's, and a row written by a clock up to this far behind
// is still read by the claims, not left to the looks.
const claimBoundMargin = time.Minute

// claimBound returns the least id the claims from floor read on a
// partitioned table (claim.sql's $11), so that their plans leave out the
// older partitions: the first id made claimBoundMargin before the floor's
// time. It returns nil (no bound) on an unpartitioned table and for a
// floor at the bottom. The rows below it are the looks' (look_below.sql);
// a claim that takes some lowers its bound to them.
func (s *pgStore) claimBound(ctx context.Context, from store.Floor) (*[16]byte, error) {
	if !from.Due.Finite() {
		return nil, nil
	}
	if partitioned, err := s.isPartitioned(ctx); err != nil || !partitioned {
		return nil, err
	}
	id := [16]byte(migrations.BoundID(from.Due.Time.Add(-claimBoundMargin)))
	return &id, nil
}

// withDue appends to dest where what a lease claim returns after the
// columns every claim does goes: next_retry_at, for the floor, and the
// tuple id.
func withDue(x *store.Row, dest []any) []any {
	return append(dest, (*pgTime)(&x.Due), (*pgtype.TID)(&x.TID))
}

// collectRows reads claimed rows; extra, when not nil, appends to dest
// where the columns the claim returns after those every claim does go.
func collectRows(rows pgx.Rows, extra func(x *store.Row, dest []any) []any) ([]store.Row, error) {
	claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Row, error) {
		var x store.Row
		// The id as [16]byte: pgx decodes that from binary, whereas
		// uuid.UUID, a sql.Scanner, would go through text.
		dest := append(make([]any, 0, 11), (*[16]byte)(&x.ID), &x.Topic, &x.Key, &x.Payload, &x.Headers, &x.Attempt, (*pgTime)(&x.CreatedAt), &x.Size)
		if extra != nil {
			dest = extra(&x, dest)
		}
		err := r.Scan(dest...)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return claimed, nil
}
