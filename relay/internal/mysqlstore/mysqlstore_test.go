package mysqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
	"github.com/outboxrelay/outboxrelay/relay/internal/store/storetest"
)

// mysqlBundle is a migrated MariaDB/MySQL database of the test's own and
// a store on it.
type mysqlBundle struct {
	t  *testing.T
	db *sql.DB
	s  *Store
}

// defaultBounds are the relay's default byte bounds (BatchBytes,
// MaxEventBytes).
var defaultBounds = store.Bounds{Batch: 4 << 20, Event: 16 << 20}

// everything is the range of a claim that reads every pending row and
// every lapsed lease, from the oldest.
var everything = store.ClaimRange{From: store.Bottom, Lapsed: true}

func setupMySQL(t *testing.T, lease time.Duration) *mysqlBundle {
	t.Helper()
	db, _ := mariadbtest.DB(t)
	if _, err := migrations.UpMySQL(context.Background(), db, outbox.Table{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &mysqlBundle{t: t, db: db, s: New(db, Config{Lease: lease, Bounds: defaultBounds})}
}

// insert writes n pending rows of topic, due dueIn from the database's
// now (negative: in the past), and returns their ids in insertion order.
func (b *mysqlBundle) insert(n int, topic string, dueIn time.Duration) []uuid.UUID {
	b.t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		_, err := b.db.Exec("INSERT INTO outbox (id, topic, `key`, payload, headers, next_retry_at) VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
			ids[i][:], topic, []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("payload %d", i)), `{"h":"v"}`, dueIn.Microseconds())
		if err != nil {
			b.t.Fatal(err)
		}
	}
	return ids
}

// exec runs a statement of the test's own.
func (b *mysqlBundle) exec(q string, args ...any) {
	b.t.Helper()
	if _, err := b.db.Exec(q, args...); err != nil {
		b.t.Fatalf("%s: %v", q, err)
	}
}

// state is a row as the table holds it.
type mysqlRowState struct {
	status    string
	attempt   int
	lockedBy  sql.NullString
	leaseLeft sql.NullFloat64 // seconds from the database's now to locked_until
	dueIn     float64         // seconds from the database's now to next_retry_at
	lastError sql.NullString
	sentAt    bool
	failedAt  bool
}

func (b *mysqlBundle) state(id uuid.UUID) mysqlRowState {
	b.t.Helper()
	var st mysqlRowState
	err := b.db.QueryRow(`SELECT status, attempt, locked_by,
	        TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until) / 1e6,
	        TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), next_retry_at) / 1e6,
	        last_error, sent_at IS NOT NULL, failed_at IS NOT NULL
	    FROM outbox WHERE id = ?`, id[:]).Scan(&st.status, &st.attempt, &st.lockedBy, &st.leaseLeft, &st.dueIn, &st.lastError, &st.sentAt, &st.failedAt)
	if err != nil {
		b.t.Fatalf("row %s: %v", id, err)
	}
	return st
}

func (b *mysqlBundle) claim(owner string, limit int, rg store.ClaimRange) []store.Row {
	b.t.Helper()
	rows, _, err := b.s.Claim(context.Background(), owner, limit, rg, nil)
	if err != nil {
		b.t.Fatalf("claim: %v", err)
	}
	return rows
}

func rowIDs(rows []store.Row) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

func TestMySQLClaimLeasesDueRowsOldestFirst(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	older := b.insert(3, "orders", -time.Minute)
	newer := b.insert(2, "orders", -time.Second)
	future := b.insert(1, "orders", time.Hour)
	sentRow := b.insert(1, "orders", -time.Hour)
	b.exec("UPDATE outbox SET status = 'sent', sent_at = UTC_TIMESTAMP(6) WHERE id = ?", sentRow[0][:])
	b.exec("UPDATE outbox SET `key` = NULL WHERE id = ?", older[0][:])

	rows := b.claim("relay-a#1", 10, everything)
	want := append(slices.Clone(older), newer...)
	if got := rowIDs(rows); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want the due rows oldest first %v", got, want)
	}
	for i, r := range rows {
		if r.Topic != "orders" || string(r.Headers) != `{"h": "v"}` && string(r.Headers) != `{"h":"v"}` || r.Attempt != 1 || !r.CreatedAt.Valid || !r.Due.Valid {
			t.Fatalf("row %d: %+v", i, r)
		}
		if r.Due.Time.After(time.Now().Add(time.Minute)) {
			t.Fatalf("row %d due %v: not the stored next_retry_at", i, r.Due.Time)
		}
	}
	if rows[0].Key != nil || string(rows[1].Key) != "k1" || string(rows[1].Payload) != "payload 1" {
		t.Fatalf("key/payload: %q %q %q", rows[0].Key, rows[1].Key, rows[1].Payload)
	}
	for _, id := range want {
		st := b.state(id)
		if st.status != "processing" || st.lockedBy.String != "relay-a#1" || st.attempt != 1 {
			t.Fatalf("claimed row %s: %+v", id, st)
		}
		// The lease ends one Lease after the database's now.
		if !st.leaseLeft.Valid || st.leaseLeft.Float64 > 60 || st.leaseLeft.Float64 < 50 {
			t.Fatalf("lease left %v s, want about 60", st.leaseLeft)
		}
	}
	if st := b.state(future[0]); st.status != "pending" || st.attempt != 0 {
		t.Fatalf("a row not due was claimed: %+v", st)
	}
	if again := b.claim("relay-b#1", 10, everything); len(again) != 0 {
		t.Fatalf("a second claim took %d leased rows", len(again))
	}
}

// A row another transaction holds is skipped, not waited for.
func TestMySQLClaimSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	ids := b.insert(4, "t", -time.Second)
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	// One primary-key look-up each: on a table this small an IN list may
	// be planned as a scan, which locks every row under REPEATABLE READ.
	for _, id := range []uuid.UUID{ids[0], ids[2]} {
		if _, err := tx.Exec("SELECT id FROM outbox WHERE id = ? FOR UPDATE", id[:]); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, _, err := b.s.Claim(cctx, "relay-a#1", 10, everything, nil)
	if err != nil {
		t.Fatalf("claim beside a locked row: %v", err)
	}
	if got := rowIDs(rows); !slices.Equal(got, []uuid.UUID{ids[1], ids[3]}) {
		t.Fatalf("claimed %v, want the unlocked rows %v", got, []uuid.UUID{ids[1], ids[3]})
	}
	// The write-backs of the claimed rows do not wait for the other
	// transaction either: they read only their own rows.
	mine := []uuid.UUID{ids[1], ids[3]}
	if fenced, err := b.s.Extend(cctx, "relay-a#1", mine); err != nil || fenced != 0 {
		t.Fatalf("extend beside a locked row: %d, %v", fenced, err)
	}
	if fenced, err := b.s.MarkRetry(cctx, "relay-a#1", []store.Retry{{ID: ids[1], Delay: time.Hour, Error: "e"}}); err != nil || fenced != 0 {
		t.Fatalf("mark retry beside a locked row: %d, %v", fenced, err)
	}
	if fenced, err := b.s.MarkSent(cctx, "relay-a#1", ids[3:], nil); err != nil || fenced != 0 {
		t.Fatalf("mark sent beside a locked row: %d, %v", fenced, err)
	}
	if n, err := b.s.CountDue(cctx, 10); err != nil || n != 2 {
		t.Fatalf("countDue beside locked rows: %d, %v; want the 2 locked ones", n, err)
	}
}

func TestMySQLConcurrentClaimsNeverOverlap(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	const total, claimers, batch = 300, 4, 7
	b.insert(total, "t", -time.Second)
	var mu sync.Mutex
	owners := map[uuid.UUID]string{}
	var dup []uuid.UUID
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for c := range claimers {
		wg.Go(func() {
			for n := 1; ; n++ {
				owner := fmt.Sprintf("relay-%d#%d", c, n)
				rows, _, err := b.s.Claim(context.Background(), owner, batch, everything, nil)
				if err != nil {
					errs <- err
					return
				}
				if len(rows) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rows {
					if _, ok := owners[r.ID]; ok {
						dup = append(dup, r.ID)
					}
					owners[r.ID] = owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("claim: %v", err)
	}
	if len(dup) > 0 || len(owners) != total {
		t.Fatalf("%d rows claimed, %d twice (%v); want %d once each", len(owners), len(dup), dup, total)
	}
	for id, owner := range owners {
		if st := b.state(id); st.lockedBy.String != owner || st.attempt != 1 {
			t.Fatalf("row %s: %+v, claimed by %s", id, st, owner)
		}
	}
}

func TestMySQLLapsedLeaseRescueAndFencing(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	ids := b.insert(2, "t", -time.Second)
	ctx := context.Background()
	if rows := b.claim("relay-a#1", 10, everything); len(rows) != 2 {
		t.Fatalf("first claim took %d rows", len(rows))
	}
	// Relay a froze: its leases ended, one an hour ago, one a second ago.
	b.exec("UPDATE outbox SET locked_until = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE id = ?", ids[0][:])
	b.exec("UPDATE outbox SET locked_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?", ids[1][:])

	if rows := b.claim("relay-b#1", 10, store.ClaimRange{From: store.Bottom}); len(rows) != 0 {
		t.Fatalf("a claim without the lapsed branch took %d rows", len(rows))
	}
	recent := b.claim("relay-b#2", 10, store.ClaimRange{From: store.Bottom, Lapsed: true, LapsedWithin: time.Minute})
	if got := rowIDs(recent); !slices.Equal(got, []uuid.UUID{ids[1]}) {
		t.Fatalf("lapsed within a minute: claimed %v, want %v", got, ids[1])
	}
	rescued := b.claim("relay-b#3", 10, everything)
	if got := rowIDs(rescued); !slices.Equal(got, []uuid.UUID{ids[0]}) || rescued[0].Attempt != 2 {
		t.Fatalf("every lapsed lease: claimed %v (attempt %d), want %v at attempt 2", got, rescued[0].Attempt, ids[0])
	}
	if st := b.state(ids[0]); st.status != "processing" || st.lockedBy.String != "relay-b#3" || st.leaseLeft.Float64 < 50 {
		t.Fatalf("rescued row: %+v", st)
	}

	// relay a wakes up: every write-back it tries is fenced out and
	// changes nothing.
	before := b.state(ids[0])
	stale := "relay-a#1"
	checks := []struct {
		what string
		do   func() (int, error)
	}{
		{"mark sent", func() (int, error) { return b.s.MarkSent(ctx, stale, ids[:1], nil) }},
		{"mark retry", func() (int, error) {
			return b.s.MarkRetry(ctx, stale, []store.Retry{{ID: ids[0], Delay: time.Hour, Error: "x", Refund: true}})
		}},
		{"mark failed", func() (int, error) { return b.s.MarkFailed(ctx, stale, []store.Failure{{ID: ids[0], Error: "x"}}) }},
		{"release", func() (int, error) { return b.s.Release(ctx, stale, ids[:1]) }},
		{"extend", func() (int, error) { return b.s.Extend(ctx, stale, ids[:1]) }},
	}
	for _, c := range checks {
		fenced, err := c.do()
		if err != nil || fenced != 1 {
			t.Fatalf("%s with a stale token: fenced %d, %v; want 1", c.what, fenced, err)
		}
		after := b.state(ids[0])
		if after.status != before.status || after.attempt != before.attempt || after.lockedBy != before.lockedBy ||
			after.lastError != before.lastError || after.leaseLeft.Float64 > before.leaseLeft.Float64+1 {
			t.Fatalf("%s with a stale token changed the row: %+v, was %+v", c.what, after, before)
		}
	}
	// The holder's own write-back goes through; a mark-sent batched into a
	// claim is fenced the same way.
	if fenced, err := b.s.MarkSent(ctx, "relay-b#3", ids[:1], nil); err != nil || fenced != 0 {
		t.Fatalf("holder's mark sent: fenced %d, %v", fenced, err)
	}
	_, fenced, err := b.s.Claim(ctx, "relay-c#1", 10, everything, []store.SentBatch{{Owner: "relay-a#1", IDs: ids[1:]}, {Owner: "relay-b#2", IDs: ids[1:]}})
	if err != nil || !slices.Equal(fenced, []int{1, 0}) {
		t.Fatalf("claim with sent batches: fenced %v, %v; want [1 0]", fenced, err)
	}
	for _, id := range ids {
		if st := b.state(id); st.status != "sent" || !st.sentAt || st.leaseLeft.Valid {
			t.Fatalf("row %s after mark sent: %+v", id, st)
		}
	}
}

func TestMySQLRetryFailReleaseExtend(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	ctx := context.Background()
	ids := b.insert(5, "t", -time.Second)
	const owner = "relay-a#1"
	if rows := b.claim(owner, 10, everything); len(rows) != 5 {
		t.Fatalf("claimed %d", len(rows))
	}
	msg := `broker said "no" – ünïcode \ and <tags>`
	fenced, err := b.s.MarkRetry(ctx, owner, []store.Retry{
		{ID: ids[0], Delay: time.Hour, Error: msg},
		{ID: ids[1], Delay: 0, Error: "sink down", Refund: true},
	})
	if err != nil || fenced != 0 {
		t.Fatalf("mark retry: fenced %d, %v", fenced, err)
	}
	if st := b.state(ids[0]); st.status != "pending" || st.attempt != 1 || st.lastError.String != msg || st.leaseLeft.Valid ||
		st.dueIn < 3590 || st.dueIn > 3600 {
		t.Fatalf("charged retry: %+v", st)
	}
	if st := b.state(ids[1]); st.status != "pending" || st.attempt != 0 || st.dueIn > 0 {
		t.Fatalf("refunded retry: %+v", st)
	}
	if n, err := b.s.CountDue(ctx, 100); err != nil || n != 1 {
		t.Fatalf("countDue = %d, %v; want 1 (the refunded retry)", n, err)
	}

	if fenced, err := b.s.MarkFailed(ctx, owner, []store.Failure{{ID: ids[2], Error: "too large"}}); err != nil || fenced != 0 {
		t.Fatalf("mark failed: %d, %v", fenced, err)
	}
	if st := b.state(ids[2]); st.status != "failed" || !st.failedAt || st.lastError.String != "too large" || st.leaseLeft.Valid {
		t.Fatalf("failed row: %+v", st)
	}

	if fenced, err := b.s.Release(ctx, owner, ids[3:4]); err != nil || fenced != 0 {
		t.Fatalf("release: %d, %v", fenced, err)
	}
	if st := b.state(ids[3]); st.status != "pending" || st.attempt != 0 || st.leaseLeft.Valid {
		t.Fatalf("released row: %+v", st)
	}

	b.exec("UPDATE outbox SET locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 SECOND WHERE id = ?", ids[4][:])
	if fenced, err := b.s.Extend(ctx, owner, ids[4:5]); err != nil || fenced != 0 {
		t.Fatalf("extend: %d, %v", fenced, err)
	}
	if st := b.state(ids[4]); st.leaseLeft.Float64 < 50 || st.status != "processing" {
		t.Fatalf("extended row: %+v", st)
	}
	// A released and a refunded row are claimable at once; the failed and
	// the delayed ones are not.
	if got := rowIDs(b.claim("relay-a#2", 10, everything)); !slices.Equal(sortedIDs(got), sortedIDs([]uuid.UUID{ids[1], ids[3]})) {
		t.Fatalf("claim after write-backs took %v", got)
	}
	if n, err := b.s.MarkSent(ctx, owner, nil, nil); err != nil || n != 0 {
		t.Fatalf("an empty write-back: %d, %v", n, err)
	}
}

func sortedIDs(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// The floor and the swept ids of claimRange: rows below the floor wait
// unless swept.
func TestMySQLClaimFloorAndSwept(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	ids := b.insert(4, "t", -time.Minute)
	var at migrations.MySQLTime
	if err := b.db.QueryRow("SELECT next_retry_at FROM outbox WHERE id = ?", ids[2][:]).Scan(&at); err != nil {
		t.Fatal(err)
	}
	from := store.Floor{Due: store.Time{Time: at.Time, Valid: true}, ID: ids[2]}
	got := rowIDs(b.claim("relay-a#1", 10, store.ClaimRange{From: from}))
	if !slices.Equal(got, ids[2:]) {
		t.Fatalf("claim from the floor took %v, want %v", got, ids[2:])
	}
	// A look below the floor finds the rows the claim stepped over, and a
	// lapsed lease first; it locks nothing and changes nothing.
	b.exec("UPDATE outbox SET locked_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?", ids[3][:])
	ctx := context.Background()
	look, full, err := b.s.LookBelow(ctx, from, 10)
	if err != nil || full || !slices.Equal(look, [][16]byte{ids[3], ids[0], ids[1]}) {
		t.Fatalf("lookBelow = %v, full %v, %v; want the lapsed %v, then %v and %v", look, full, err, ids[3], ids[0], ids[1])
	}
	if look, full, err := b.s.LookBelow(ctx, from, 1); err != nil || !full || len(look) != 2 {
		t.Fatalf("lookBelow(limit 1) = %v, full %v, %v; want one of each and full", look, full, err)
	}
	if look, _, err := b.s.LookBelow(ctx, store.Bottom, 10); err != nil || len(look) != 1 {
		t.Fatalf("lookBelow(store.Bottom) = %v, %v; want only the lapsed lease", look, err)
	}
	if st := b.state(ids[0]); st.status != "pending" || st.attempt != 0 {
		t.Fatalf("a look changed a row: %+v", st)
	}
	b.exec("UPDATE outbox SET locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id = ?", ids[3][:])
	got = rowIDs(b.claim("relay-a#2", 10, store.ClaimRange{From: from, Swept: [][16]byte{ids[0], ids[3]}}))
	if !slices.Equal(got, ids[:1]) {
		t.Fatalf("claim with swept ids took %v, want %v (ids[3] is held)", got, ids[:1])
	}
	if n, err := b.s.CountDue(context.Background(), 1); err != nil || n != 1 {
		t.Fatalf("countDue(limit 1) = %d, %v", n, err)
	}
}

func TestMySQLRetention(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	ctx := context.Background()
	old := b.insert(5, "t", -time.Hour)
	recent := b.insert(1, "t", -time.Hour)
	others := b.insert(3, "t", -time.Hour)
	for i, id := range old {
		b.exec("UPDATE outbox SET status = 'sent', sent_at = UTC_TIMESTAMP(6) - INTERVAL ? MINUTE WHERE id = ?", 120-i, id[:])
	}
	b.exec("UPDATE outbox SET status = 'sent', sent_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE WHERE id = ?", recent[0][:])
	b.exec("UPDATE outbox SET status = 'failed', failed_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR WHERE id = ?", others[0][:])
	b.exec("UPDATE outbox SET status = 'processing', locked_by = 'x', locked_until = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR WHERE id = ?", others[1][:])

	if ok, err := b.s.ClaimJob(ctx, store.JobRetention, "run-1"); err != nil || !ok {
		t.Fatalf("claim job: %v, %v", ok, err)
	}
	if ok, err := b.s.ClaimJob(ctx, store.JobRetention, "run-2"); err != nil || ok {
		t.Fatalf("a second run claimed a held job: %v, %v", ok, err)
	}
	if n, held, err := b.s.DeleteSent(ctx, "run-2", "", time.Hour, 10); err != nil || held || n != 0 {
		t.Fatalf("deleteSent by a run that does not hold the job: %d, %v, %v", n, held, err)
	}
	if n := b.count("status = 'sent'"); n != 6 {
		t.Fatalf("a fenced-out batch deleted rows: %d sent left", n)
	}
	n, held, err := b.s.DeleteSent(ctx, "run-1", "", time.Hour, 2)
	if err != nil || !held || n != 2 {
		t.Fatalf("first batch: %d, %v, %v; want 2 held", n, held, err)
	}
	for _, id := range old[:2] {
		if b.count("id = ?", id[:]) != 0 {
			t.Fatalf("the oldest sent row %s was not deleted first", id)
		}
	}
	n, held, err = b.s.DeleteSent(ctx, "run-1", "", time.Hour, 10)
	if err != nil || !held || n != 3 {
		t.Fatalf("second batch: %d, %v, %v; want 3", n, held, err)
	}
	if n, _, err := b.s.DeleteSent(ctx, "run-1", "", time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("third batch: %d, %v", n, err)
	}
	if left := b.count("1 = 1"); left != 4 {
		t.Fatalf("%d rows left, want the recent sent row and the 3 unsent ones", left)
	}
	if b.count("id = ?", recent[0][:]) != 1 {
		t.Fatal("a sent row within the retention was deleted")
	}
	var last, total int64
	if err := b.db.QueryRow("SELECT last_deleted, total_deleted FROM outbox_jobs WHERE job = 'retention'").Scan(&last, &total); err != nil || last != 5 || total != 5 {
		t.Fatalf("job counts last %d total %d, %v; want 5 and 5", last, total, err)
	}
	if _, _, err := b.s.DeleteSent(ctx, "run-1", "`other`", time.Hour, 10); err == nil {
		t.Fatal("deleteSent accepted a partition target")
	}
	if held, err := b.s.FinishJob(ctx, store.JobRetention, "run-2", true, time.Hour); err != nil || held {
		t.Fatalf("finishJob by a stranger: %v, %v", held, err)
	}
	if held, err := b.s.FinishJob(ctx, store.JobRetention, "run-1", true, time.Hour); err != nil || !held {
		t.Fatalf("finishJob: %v, %v", held, err)
	}
	if ok, err := b.s.ClaimJob(ctx, store.JobRetention, "run-3"); err != nil || ok {
		t.Fatalf("a job scheduled an hour ahead was claimed: %v, %v", ok, err)
	}
	if now, err := mysqlNow(ctx, b.s.db); err != nil || time.Since(now).Abs() > time.Minute {
		t.Fatalf("the database clock read %v (%v)", now, err)
	}
}

func (b *mysqlBundle) count(where string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.db.QueryRow("SELECT COUNT(*) FROM outbox WHERE "+where, args...).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// The store is ready only on a migrated table.
func TestMySQLStoreReady(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	s := New(db, Config{Table: outbox.Table{Name: "elsewhere"}, Lease: time.Minute, Bounds: defaultBounds})
	err := s.Ready(context.Background())
	if !(*Store)(nil).Fatal(err) {
		t.Fatalf("ready on an empty database: %v, want a fatal error", err)
	}
	if _, err := migrations.UpMySQL(context.Background(), db, outbox.Table{Name: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("ready: %v", err)
	}
}

// Every file in sql/ is a statement the store loads.
func TestMySQLStatementsAllUsed(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	q := loadStatements(outbox.Table{}, func(f string) { read[f] = true })
	entries, err := fs.ReadDir(sqlFiles, "sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !read[strings.TrimSuffix(e.Name(), ".sql")] {
			t.Errorf("sql/%s is never loaded", e.Name())
		}
	}
	if strings.Contains(q.claimDue, "{{") || strings.Contains(q.claimJob, "{{") || strings.Contains(q.claimDue, "--") {
		t.Fatalf("a placeholder or comment is left: %s", q.claimDue)
	}
}

// A pool without parseTime and in a session time zone other than UTC
// claims, leases and reads times the same: every time comes from
// UTC_TIMESTAMP, and DATETIME text scans as UTC.
func TestMySQLStoreWithoutParseTimeOrUTCSession(t *testing.T) {
	t.Parallel()
	db, dsn := mariadbtest.DB(t)
	if _, err := migrations.UpMySQL(context.Background(), db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ParseTime = false
	cfg.Params = map[string]string{"time_zone": "'+05:00'"}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain := sql.OpenDB(connector)
	defer plain.Close()
	b := &mysqlBundle{t: t, db: plain, s: New(plain, Config{Lease: time.Minute, Bounds: defaultBounds})}
	ids := b.insert(2, "t", -time.Second)
	b.exec("INSERT INTO outbox (id, topic, payload) VALUES (?, 't', 'p')", append(make([]byte, 15), 1)) // every default
	rows := b.claim("relay-a#1", 10, everything)
	if len(rows) != 3 {
		t.Fatalf("claimed %d rows, want 3 (the row written with defaults in a +05:00 session is due)", len(rows))
	}
	for _, r := range rows {
		if d := time.Since(r.CreatedAt.Time); d < -time.Minute || d > time.Minute {
			t.Fatalf("created_at %v is %v from now: not read as UTC", r.CreatedAt.Time, d)
		}
	}
	if st := b.state(ids[0]); st.leaseLeft.Float64 < 50 || st.leaseLeft.Float64 > 60 {
		t.Fatalf("lease left %v s in a +05:00 session, want about 60", st.leaseLeft)
	}
	if now, err := mysqlNow(context.Background(), b.s.db); err != nil || time.Since(now).Abs() > time.Minute {
		t.Fatalf("the database clock read %v (%v)", now, err)
	}
}

// Claimers whose leases lapse at once rescue each other's rows while each
// marks its previous batch sent inside its next claim: every row is still
// marked sent exactly once (the fence refuses the rest), and none is lost.
func TestMySQLLapsingClaimersMarkEachRowSentOnce(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, 0) // every lease has lapsed by the next statement
	const total, claimers, batch = 200, 4, 9
	b.insert(total, "t", -time.Second)
	var mu sync.Mutex
	marked := 0
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for c := range claimers {
		wg.Go(func() {
			var pending []store.SentBatch
			for n := 1; ; n++ {
				owner := fmt.Sprintf("relay-%d#%d", c, n)
				rows, fenced, err := b.s.Claim(context.Background(), owner, batch, everything, pending)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, sb := range pending {
					marked += len(sb.IDs) - fenced[i]
				}
				mu.Unlock()
				if len(rows) == 0 {
					return
				}
				pending = []store.SentBatch{{Owner: owner, IDs: rowIDs(rows)}}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("claim: %v", err)
	}
	if marked != total {
		t.Fatalf("%d rows marked sent, want %d: each exactly once", marked, total)
	}
	if n := b.count("status = 'sent'"); n != total {
		t.Fatalf("%d rows sent, want %d", n, total)
	}
}

// A batch of thousands of rows fits one statement of each kind: the id
// lists and the per-row CASEs stay within the server's 65,535 parameters.
func TestMySQLLargeBatch(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	ctx := context.Background()
	const n = 3000
	// 60 x 50 rows: a recursive CTE stops at 1,000 iterations by default.
	b.exec(`INSERT INTO outbox (id, topic, payload, next_retry_at)
	    WITH RECURSIVE hi (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM hi WHERE i < 59),
	                   lo (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM lo WHERE i < 49)
	    SELECT UNHEX(CONCAT('0190', LPAD(HEX(hi.i * 50 + lo.i), 28, '0'))), 't', 'p', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND
	    FROM hi CROSS JOIN lo`)
	rows := b.claim("relay-a#1", n, everything)
	if len(rows) != n {
		t.Fatalf("claimed %d of %d", len(rows), n)
	}
	rs := make([]store.Retry, n)
	for i, r := range rows {
		rs[i] = store.Retry{ID: r.ID, Delay: time.Duration(i) * time.Millisecond, Error: fmt.Sprintf("e%d", i), Refund: i%2 == 0}
	}
	before, err := mysqlNow(ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	if fenced, err := b.s.MarkRetry(ctx, "relay-a#1", rs); err != nil || fenced != 0 {
		t.Fatalf("mark retry of %d rows: %d, %v", n, fenced, err)
	}
	after, err := mysqlNow(ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.count("status = 'pending' AND attempt = 0 AND last_error IS NOT NULL"); got != n/2 {
		t.Fatalf("%d refunded retries, want %d", got, n/2)
	}
	// The last row is due its delay after the write-back, on the
	// database clock, however long the write-back took.
	var due migrations.MySQLTime
	var lastError string
	if err := b.db.QueryRowContext(ctx, "SELECT next_retry_at, last_error FROM outbox WHERE id = ?", rows[n-1].ID[:]).Scan(&due, &lastError); err != nil {
		t.Fatal(err)
	}
	delay := rs[n-1].Delay
	if lastError != fmt.Sprintf("e%d", n-1) || due.Time.Before(before.Add(delay)) || due.Time.After(after.Add(delay)) {
		t.Fatalf("the last row's retry: %q due %v, want due %v after the write-back, between %v and %v", lastError, due.Time, delay, before, after)
	}
}

// mysqlNow reads the database clock, in UTC whatever the session's
// time_zone and the DSN's parseTime (migrations.MySQLTime).
func mysqlNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var now migrations.MySQLTime
	err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&now)
	return now.Time, err
}

// The MySQL claim bounds what it reads as PostgreSQL's does: it measures
// the rows it locks, keeps them up to the one at which their bytes reach
// the batch bound, and reads the payload, key and headers of those within
// the event bound only.
func TestMySQLClaimBoundsWhatItReads(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	b.s.bounds = storetest.SizedBounds
	ids := make([]uuid.UUID, len(storetest.SizedPayloads))
	for i, n := range storetest.SizedPayloads {
		ids[i] = uuid.Must(uuid.NewV7())
		b.exec("INSERT INTO outbox (id, topic, `key`, payload, next_retry_at) VALUES (?, 'orders', 'k', ?, UTC_TIMESTAMP(6) - INTERVAL ? SECOND)",
			ids[i][:], bytes.Repeat([]byte("p"), n), len(storetest.SizedPayloads)-i)
	}
	rows := b.claim("relay-a#1", 10, everything)
	storetest.CheckSizedClaim(t, "the MySQL claim", ids, rows)
	for _, id := range ids[:5] {
		if st := b.state(id); st.status != "processing" || st.lockedBy.String != "relay-a#1" {
			t.Errorf("row %s: %+v; want it leased to the claim, the big one too", id, st)
		}
	}
	if st := b.state(ids[5]); st.status != "pending" || st.attempt != 0 {
		t.Errorf("the row past the bound: %+v; want it pending, untouched", st)
	}
}

// Backlog counts rows by state through the status-led indexes,
// exactly up to the limit and by the server's estimate beyond it, and
// reports how long the oldest due row has waited.
func TestMySQLBacklog(t *testing.T) {
	b := setupMySQL(t, 30*time.Second)
	b.insert(5, "t", -time.Hour)   // pending, due an hour ago
	b.insert(3, "t", time.Hour)    // pending, delayed
	b.insert(4, "t", -time.Minute) // then processing
	b.exec("UPDATE outbox SET status = 'processing', locked_by = 'x#1', locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE next_retry_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE AND UTC_TIMESTAMP(6)")
	b.insert(2, "t", -time.Minute) // then failed
	b.exec("UPDATE outbox SET status = 'failed', failed_at = UTC_TIMESTAMP(6) WHERE status = 'pending' AND next_retry_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE AND UTC_TIMESTAMP(6)")
	b.insert(6, "t", -time.Minute) // then sent: never counted
	b.exec("UPDATE outbox SET status = 'sent', sent_at = UTC_TIMESTAMP(6) WHERE status = 'pending' AND next_retry_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE AND UTC_TIMESTAMP(6)")
	ctx := context.Background()
	got, err := b.s.Backlog(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Backlog{PendingDue: store.BacklogCount{Rows: 5}, PendingDelayed: store.BacklogCount{Rows: 3}, Processing: store.BacklogCount{Rows: 4}, Failed: store.BacklogCount{Rows: 2}}
	if got.PendingDue != want.PendingDue || got.PendingDelayed != want.PendingDelayed || got.Processing != want.Processing || got.Failed != want.Failed {
		t.Errorf("Backlog = %+v, want counts %+v", got, want)
	}
	if got.OldestDue < 59*time.Minute || got.OldestDue > 61*time.Minute {
		t.Errorf("OldestDue = %v, want about an hour", got.OldestDue)
	}
	capped, err := b.s.Backlog(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]store.BacklogCount{"pending due": capped.PendingDue, "pending delayed": capped.PendingDelayed, "processing": capped.Processing, "failed": capped.Failed} {
		if !c.Estimated || c.Rows < 2 {
			t.Errorf("%s with limit 2 = %+v, want an estimate of at least 2", name, c)
		}
	}
}
