package relay

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// Backlog counts the rows of each state exactly below the limit, stops
// and estimates at it, reports how long the oldest due row has been due,
// and, with ordered delivery, the keys waiting behind a head in retry.
func TestBacklog(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	// 5 due (the oldest due 90s ago), 3 delayed of which 2 wait for a
	// retry after a failure (keys k1 and k2 of the ordered topic, and one
	// of an unordered topic), 2 processing, 4 failed, 6 sent.
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+table.Ident()+` (id, topic, key, payload, status, next_retry_at, last_error, locked_by, locked_until)
		SELECT gen_random_uuid(), s.topic, convert_to(s.key, 'UTF8'), '\x00', s.status, now() + s.due * interval '1 second', s.err,
		       CASE WHEN s.status = 'processing' THEN 'r#1' END, CASE WHEN s.status = 'processing' THEN now() + interval '1 minute' END
		FROM (VALUES
			('orders', 'k0', 'pending', -90, NULL), ('orders', 'k0', 'pending', -10, NULL), ('orders', NULL, 'pending', -5, NULL),
			('users', NULL, 'pending', -1, NULL), ('users', 'u', 'pending', 0, NULL),
			('orders', 'k1', 'pending', 30, 'timeout'), ('orders', 'k2', 'pending', 60, 'timeout'),
			('users', 'u1', 'pending', 30, 'timeout'),
			('orders', 'k3', 'processing', 0, NULL), ('users', NULL, 'processing', 0, NULL),
			('orders', 'k4', 'failed', 0, 'rejected'), ('orders', 'k4', 'failed', 0, 'rejected'),
			('users', NULL, 'failed', 0, 'rejected'), ('users', NULL, 'failed', 0, 'rejected')
		) AS s(topic, key, status, due, err)
`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+table.Ident()+` (id, topic, payload, status, sent_at)
		SELECT gen_random_uuid(), 'orders', '\x00', 'sent', now() FROM generate_series(1, 6)`); err != nil {
		t.Fatal(err)
	}
	ordered := quietRelay(t, pool, nopPublisher{}, Config{Table: table, Ordering: Ordering{Topics: []string{"orders"}}})
	b, err := ordered.Backlog(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	exact := func(n int64) BacklogCount { return BacklogCount{Rows: n} }
	if b.PendingDue != exact(5) || b.PendingDelayed != exact(3) || b.Processing != exact(2) || b.Failed != exact(4) {
		t.Errorf("counts %+v, want 5 due, 3 delayed, 2 processing, 4 failed, all exact", b)
	}
	if b.OldestDue < 89*time.Second || b.OldestDue > 120*time.Second {
		t.Errorf("OldestDue = %v, want about 90s", b.OldestDue)
	}
	if b.KeysBlocked != 2 {
		t.Errorf("KeysBlocked = %d, want 2 (k1 and k2 of the ordered topic)", b.KeysBlocked)
	}

	// Without ordered topics no key is blocked; at the limit a count is
	// the planner's estimate, never below the limit.
	plain := quietRelay(t, pool, nopPublisher{}, Config{Table: table})
	if _, err := pool.Exec(t.Context(), "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	b, err = plain.Backlog(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if b.KeysBlocked != 0 {
		t.Errorf("KeysBlocked = %d without ordered topics, want 0", b.KeysBlocked)
	}
	for name, c := range map[string]BacklogCount{"due": b.PendingDue, "delayed": b.PendingDelayed, "failed": b.Failed} {
		if !c.Estimated || c.Rows < 3 {
			t.Errorf("%s at the limit 3: %+v, want an estimate of at least 3", name, c)
		}
	}
	if b.Processing != exact(2) {
		t.Errorf("processing below the limit: %+v, want exactly 2", b.Processing)
	}

	// Nothing due: the age is 0.
	if _, err := pool.Exec(t.Context(), "UPDATE "+table.Ident()+" SET status = 'sent', sent_at = now() WHERE status = 'pending' AND next_retry_at <= now()"); err != nil {
		t.Fatal(err)
	}
	if b, err = plain.Backlog(t.Context(), 0); err != nil || b.PendingDue != exact(0) || b.OldestDue != 0 {
		t.Errorf("with nothing due: %+v, %v; want 0 due, age 0", b, err)
	}
}

// A read that outlives its context's deadline is stopped by the server:
// the deadline becomes the transaction's statement timeout.
func TestBacklogHonoursItsDeadline(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table})
	// Hold an ACCESS EXCLUSIVE lock: the read waits for it.
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context()) //nolint:errcheck // test cleanup
	if _, err := tx.Exec(t.Context(), "LOCK TABLE "+table.Ident()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := r.Backlog(ctx, 0); err == nil {
		t.Fatal("a read blocked by a lock succeeded")
	}
	if took := time.Since(start); took > 30*time.Second { // the lock is held until the test ends
		t.Errorf("the read took %v, want about its 200ms deadline", took)
	}
}
