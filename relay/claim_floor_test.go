package relay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

func TestNextFloor(t *testing.T) {
	at := func(s int) store.Time {
		return store.Time{Time: time.Unix(int64(s), 0), Valid: true}
	}
	rw := func(due store.Time, id byte) store.Row { return store.Row{ID: [16]byte{15: id}, Due: due} }
	inf := store.Time{Inf: -1, Valid: true}
	margin := store.Time{Time: time.Unix(5, 0).Add(-floorMargin), Valid: true}
	for _, c := range []struct {
		name  string
		prev  store.Floor
		rows  []store.Row
		limit int
		want  store.Floor
	}{
		{"not full: floorMargin below its oldest", store.Bottom, []store.Row{rw(at(5), 1), rw(at(6), 2)}, 3, store.Floor{Due: margin}},
		{"empty: where it was", store.Floor{Due: at(3)}, nil, 2, store.Floor{Due: at(3)}},
		{"full: earliest due", store.Bottom, []store.Row{rw(at(7), 1), rw(at(5), 9), rw(at(6), 2)}, 3, store.Floor{Due: at(5), ID: [16]byte{15: 9}}},
		{"full: same due, lowest id", store.Bottom, []store.Row{rw(at(5), 4), rw(at(5), 3)}, 2, store.Floor{Due: at(5), ID: [16]byte{15: 3}}},
		{"infinite and null due ignored", store.Bottom, []store.Row{rw(inf, 1), rw(store.Time{}, 2), rw(at(8), 3)}, 3, store.Floor{Due: at(8), ID: [16]byte{15: 3}}},
		{"nothing finite", store.Floor{Due: at(2)}, []store.Row{rw(inf, 1)}, 1, store.Floor{Due: at(2)}},
		{"never down: full", store.Floor{Due: at(6)}, []store.Row{rw(at(5), 1)}, 1, store.Floor{Due: at(6)}},
		{"never down: not full", store.Floor{Due: at(5)}, []store.Row{rw(at(5), 1)}, 2, store.Floor{Due: at(5)}},
	} {
		got := nextFloor(c.prev, c.rows, c.limit)
		if got.ID != c.want.ID || got.Due.Inf != c.want.Due.Inf || !got.Due.Time.Equal(c.want.Due.Time) {
			t.Errorf("%s: nextFloor = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestSweepEvery(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{time.Millisecond, lapsedEvery},
		{10 * time.Millisecond, 2 * time.Second},
		{time.Second, sweepMax},
	} {
		if got := sweepEvery(c.took); got != c.want {
			t.Errorf("sweepEvery(%v) = %v, want %v", c.took, got, c.want)
		}
	}
}

// Looks are spaced by the shortest of the last four: one slow look beside
// other work does not put the next far off, looks that are all slow do.
func TestLookCostsSpaceByTheShortestRecentLook(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name  string
		looks []time.Duration
		want  time.Duration
	}{
		{"first look", []time.Duration{10 * ms}, 2 * time.Second},
		{"one slow look after fast ones", []time.Duration{5 * ms, 5 * ms, 150 * ms}, time.Second},
		{"all slow", []time.Duration{300 * ms, 400 * ms, 350 * ms, 500 * ms}, sweepMax},
		{"fast looks pushed out by four slow ones", []time.Duration{5 * ms, 400 * ms, 400 * ms, 400 * ms, 400 * ms}, sweepMax},
		{"slow, then fast again", []time.Duration{400 * ms, 400 * ms, ms}, lapsedEvery},
	} {
		var l lookCosts
		for _, d := range c.looks {
			l.add(d)
		}
		if got := l.every(); got != c.want {
			t.Errorf("%s: every() = %v, want %v", c.name, got, c.want)
		}
	}
}

// Run's claims start at the floor: a row that turns up below it waits for
// a look below the floor, which reads from the store.Bottom, and the claim
// after the look takes it by id; a claim that looks for lapsed leases
// leaves it too.
func TestRowsBelowTheFloorWaitForALook(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "floor"})
	testdb.InsertPending(t, pool, table, 6)
	c := r.stream
	c.lapsedAt = time.Now().Add(time.Hour) // no look for lapsed leases until told

	if res, err := r.pipe.process(ctx, c, 2, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("first claim = %+v, %v; want 2 claimed", res, err)
	}
	if c.floor == store.Bottom {
		t.Fatal("a full batch left the floor at the store.Bottom")
	}
	// A row committed late, its transaction older than the claimed rows.
	_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+
		` (id, topic, payload, next_retry_at) VALUES (gen_random_uuid(), 'orders', '\x01', now() - interval '1 hour')`)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.pipe.process(ctx, c, 2, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("claim in the backlog = %+v, %v; want 2 claimed", res, err)
	}
	if n := pendingPayloads(t, pool, table, `\x01`); n != 1 {
		t.Fatalf("the late row was claimed from above the floor (%d left pending)", n)
	}
	c.lapsedAt = time.Time{} // a look for lapsed leases
	if res, err := r.pipe.process(ctx, c, 3, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("claim that looks for lapsed leases = %+v, %v; want the 2 rows above the floor", res, err)
	}
	if n := pendingPayloads(t, pool, table, `\x01`); n != 1 {
		t.Fatal("a claim's look for lapsed leases read below the floor")
	}
	floorBefore := c.floor
	if found, full, err := c.look(ctx); err != nil || found != 1 || full || len(c.found) != 1 {
		t.Fatalf("look = %d found (%d kept), full %v, %v; want the late row", found, len(c.found), full, err)
	}
	if n := pendingPayloads(t, pool, table, `\x01`); n != 1 {
		t.Fatal("the look took the late row: it must only read")
	}
	if res, err := r.pipe.process(ctx, c, 2, nil); err != nil || res.Claimed != 1 {
		t.Fatalf("claim after the look = %+v, %v; want the late row", res, err)
	}
	if n := pendingPayloads(t, pool, table, `\x01`); n != 0 {
		t.Fatal("the claim after the look left the late row pending")
	}
	if len(c.found) != 0 || c.floor.Less(floorBefore) {
		t.Errorf("after the claim: %d found rows left, floor %+v (was %+v); want none, and the floor not lower", len(c.found), c.floor, floorBefore)
	}
	c.sent.flush(context.Background())
	testdb.AwaitSent(t, pool, table, 7, 20*time.Second)
}

// A look for lapsed leases that a claim makes reads the leases that ended
// since the last complete look (and lapsedMargin before it); a look below
// the floor finds them all, and the next claim takes them.
func TestLapsedLooksReadSinceTheLastOne(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "lapsed-window"})
	testdb.InsertPending(t, pool, table, 1)
	_, err := pool.Exec(ctx, "UPDATE "+table.Ident()+
		" SET status = 'processing', locked_by = 'dead#1', locked_until = now() - interval '1 hour', attempt = 1")
	if err != nil {
		t.Fatal(err)
	}
	c := r.stream
	c.lapsedAt, c.coveredAt = time.Time{}, time.Now().Add(-time.Second)
	if res, err := r.pipe.process(ctx, c, 0, nil); err != nil || res.Claimed != 0 {
		t.Fatalf("look for leases that ended within the last second = %+v, %v; want the hour-old one left", res, err)
	}
	if _, _, err := c.look(ctx); err != nil || len(c.found) != 1 {
		t.Fatalf("look below the floor found %d rows, %v; want the lapsed lease", len(c.found), err)
	}
	c.lapsedAt = time.Now().Add(time.Hour) // the claim takes it by id, not by its own look
	if res, err := r.pipe.process(ctx, c, 0, nil); err != nil || res.Claimed != 1 {
		t.Fatalf("claim after the look = %+v, %v; want the lapsed row rescued", res, err)
	}
	c.sent.flush(context.Background())
	testdb.AwaitSent(t, pool, table, 1, 20*time.Second)
}

// A look below the floor holds no lock of the relay's claims: while one is
// in flight (held at its statement by the test), a claim takes the rows
// above the floor and returns; when the look is let go, what it found is
// taken by the claim after it.
func TestClaimsGoOnWhileALookRuns(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "look-beside"})
	c := r.stream
	c.lapsedAt = time.Now().Add(time.Hour)
	testdb.InsertPending(t, pool, table, 2)
	if res, err := r.pipe.process(ctx, c, 2, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("first claim = %+v, %v; want 2 claimed", res, err)
	}
	_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+
		` (id, topic, payload, next_retry_at) VALUES (gen_random_uuid(), 'orders', '\x01', now() - interval '1 hour')`)
	if err != nil {
		t.Fatal(err)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	look := c.lookBelow
	c.lookBelow = func(ctx context.Context, from store.Floor, limit int) ([][16]byte, bool, error) {
		close(entered)
		<-release
		return look(ctx, from, limit)
	}
	looked := make(chan error, 1)
	go func() {
		_, _, err := c.look(ctx)
		looked <- err
	}()
	<-entered
	testdb.InsertPending(t, pool, table, 3)
	claimed := make(chan BatchResult, 1)
	go func() {
		res, err := r.pipe.process(ctx, c, 10, nil)
		if err != nil {
			t.Error(err)
		}
		claimed <- res
	}()
	select {
	case res := <-claimed:
		if res.Claimed != 3 {
			t.Errorf("claim during the look = %+v; want the 3 rows above the floor", res)
		}
	case <-time.After(30 * time.Second): // a guard against a hang, not a measure
		t.Fatal("a claim waited for the look below the floor")
	}
	close(release)
	if err := <-looked; err != nil {
		t.Fatal(err)
	}
	if res, err := r.pipe.process(ctx, c, 10, nil); err != nil || res.Claimed != 1 {
		t.Fatalf("claim after the look = %+v, %v; want the late row", res, err)
	}
	c.sent.flush(context.Background())
	testdb.AwaitSent(t, pool, table, 6, 20*time.Second)
}

// Under Run, a row set back below the claim floor and a lease that lapsed
// long ago are sent: the relay's looks find them and its claims take them.
// Run returns once cancelled, its looks too (the -race build of make test
// runs this with the package's other tests).
func TestRunSweepsBelowTheFloor(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "run-sweep", PollInterval: 20 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testdb.InsertPending(t, pool, table, 50)
	testdb.AwaitSent(t, pool, table, 50, 20*time.Second)
	_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+
		` (id, topic, payload, next_retry_at) VALUES (gen_random_uuid(), 'orders', '\x01', now() - interval '1 hour')`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, "INSERT INTO "+table.Ident()+
		` (id, topic, payload, status, locked_by, locked_until, attempt)
		VALUES (gen_random_uuid(), 'orders', '\x02', 'processing', 'dead#1', now() - interval '1 hour', 1)`)
	if err != nil {
		t.Fatal(err)
	}
	testdb.AwaitSent(t, pool, table, 52, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// The regression test of a claim under a held snapshot: while a REPEATABLE
// READ transaction in another session keeps every dead entry of
// pending_idx and processing_idx, the next claim of a stream reads about as
// many pages after 300 claim and mark-sent cycles as after 30, and far
// fewer than a claim from the store.Bottom, which walks past the entry of every
// row claimed since; a mark-sent reads a few pages a row.
func TestClaimsUnderAHeldSnapshotReadBoundedPages(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	// The planner's statistics are the test's own ANALYZE, not those of an
	// autoanalyze that a slow run (a busy machine) lets come in between.
	if _, err := pool.Exec(ctx, "ALTER TABLE "+table.Ident()+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "held"})
	hold, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck // ends the snapshot; nothing was written
	var n int
	if err := hold.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	c := r.stream
	c.lapsedAt = time.Now().Add(time.Hour) // no lapsed looks
	const perCycle = 5
	cycle := 0
	cycles := func(to int) {
		t.Helper()
		for ; cycle < to; cycle++ {
			// Due a day ago, 10 s apart a cycle: the floor's margin (1 s)
			// keeps only the last cycle's entries above the floor.
			_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+
				` (id, topic, payload, next_retry_at) SELECT gen_random_uuid(), 'orders', '\x00',
				now() - interval '1 day' + $1 * interval '10 seconds' FROM generate_series(1, $2)`, cycle, perCycle)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := r.pipe.process(ctx, c, 2*perCycle, nil); err != nil || res.Claimed != perCycle {
				t.Fatalf("cycle %d: %+v, %v; want %d claimed", cycle, res, err, perCycle)
			}
		}
		c.sent.flush(ctx)
	}
	reads := func(from store.Floor) int {
		t.Helper()
		return claimPages(t, pool, pgStatement(t, table, "claim"), from, nil)
	}
	cycles(30)
	early := reads(c.floor)
	// Statistics that count no processing rows, as after a VACUUM
	// (ANALYZE) of a table at rest.
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	cycles(300)
	late, fromBottom := reads(c.floor), reads(store.Bottom)
	t.Logf("pages a claim read: %d after 30 cycles, %d after 300; from the store.Bottom %d", early, late, fromBottom)
	if late > early+10 {
		t.Errorf("a claim read %d pages after 300 cycles, %d after 30: it walks the dead entries", late, early)
	}
	if fromBottom < 10*late {
		t.Errorf("a claim from the store.Bottom read %d pages, from the floor %d: the snapshot kept too few dead entries for this test to tell", fromBottom, late)
	}

	// A row set back below the floor: the look that finds it walks the
	// dead entries, off the claim path; the claim that takes it by id reads
	// its primary-key entry, not the dead entries below the floor.
	_, err = pool.Exec(ctx, "INSERT INTO "+table.Ident()+
		` (id, topic, payload, next_retry_at) VALUES (gen_random_uuid(), 'orders', '\x01', now() - interval '2 days')`)
	if err != nil {
		t.Fatal(err)
	}
	lookArgs := pgx.NamedArgs{"limit": 1000, "from_due": timestamptz(c.floor.Due), "from_id": c.floor.ID,
		"all_ordered": false, "ordered_topics": []string{}, "bound": nil}
	looked := statementPages(t, pool, pgStatement(t, table, "look_below"), lookArgs)
	if _, _, err := c.look(ctx); err != nil || len(c.found) != 1 {
		t.Fatalf("look below the floor found %d rows, %v; want the row set back", len(c.found), err)
	}
	plan := testdb.ExplainBuffers(t, pool, pgStatement(t, table, "claim"), claimArgs(c.floor, c.found))
	swept, found := plan.Pages("")
	if !found {
		t.Fatalf("the claim's plan has no index scan: %+v", plan)
	}
	t.Logf("pages the look below the floor read: %d; the claim that takes its row by id, every index: %d", looked, swept)
	if swept > late+10 {
		t.Errorf("the claim that takes the row a look found read %d pages, one from the floor %d: it walks the dead entries", swept, late)
	}
	if looked < 5*swept {
		t.Errorf("the look read %d pages, the claim after it %d: the look no longer walks what the claims skip, or the test no longer tells them apart", looked, swept)
	}
	if res, err := r.pipe.process(ctx, c, perCycle, nil); err != nil || res.Claimed != 1 {
		t.Fatalf("claim after the look = %+v, %v; want the row set back", res, err)
	}
	c.sent.flush(ctx)

	// The mark-sent of a batch looks its rows up by id, whatever
	// processing_idx holds; the same statement testing the status so that
	// the planner may read that index walks its dead entries.
	testdb.InsertPending(t, pool, table, perCycle)
	rows, _, err := r.store.Claim(ctx, "test#2", perCycle, store.ClaimRange{From: c.floor}, nil)
	if err != nil || len(rows) != perCycle {
		t.Fatalf("claim = %d rows, %v; want %d", len(rows), err, perCycle)
	}
	ids := make([][16]byte, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	q := pgStatement(t, table, "mark_sent")
	byStatus := strings.Replace(q, "(status = 'processing') IS TRUE", "status = 'processing'", 1)
	if byStatus == q {
		t.Fatal("mark_sent.sql no longer tests the status as this test expects")
	}
	byBytes := func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) }
	lo, hi := slices.MinFunc(ids, byBytes), slices.MaxFunc(ids, byBytes)
	args := pgx.NamedArgs{"ids": ids, "owner": "test#2", "lo": lo, "hi": hi}
	markedPlan, walkedPlan := testdb.ExplainBuffers(t, pool, q, args), testdb.ExplainBuffers(t, pool, byStatus, args)
	marked, found1 := markedPlan.Pages("")
	walked, found2 := walkedPlan.Pages("")
	if !found1 || !found2 {
		t.Fatalf("a mark-sent plan has no index scan: %+v\n%+v", markedPlan, walkedPlan)
	}
	t.Logf("pages a mark-sent of %d rows read: %d; testing status = 'processing': %d", perCycle, marked, walked)
	if marked > 10*perCycle {
		t.Errorf("a mark-sent of %d rows read %d pages; plan: %+v", perCycle, marked, markedPlan)
	}
	// 3x, not more: index entries that scans mark dead (LP_DEAD hints)
	// shorten the walk on a busy machine.
	if walked < 3*marked {
		t.Errorf("testing status = 'processing', a mark-sent read %d pages, as written %d: the test no longer tells them apart; plans: %+v\n%+v", walked, marked, walkedPlan, markedPlan)
	}
}

// pgStatement returns PostgreSQL's statement name
// (relay/internal/pgstore/sql/<name>.sql) for table, without its comment
// lines, as the store runs it on an unpartitioned table.
func pgStatement(t *testing.T, table outbox.Table, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("internal", "pgstore", "sql", name+".sql"))
	if err != nil {
		t.Fatal(err)
	}
	var q strings.Builder
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			q.WriteString(line)
		}
	}
	return strings.NewReplacer("{{table}}", table.Ident(), "{{shards}}", table.Related("shard_ranges"), "{{jobs}}", table.Related("jobs")).Replace(q.String())
}

// timestamptz is t as pgx sends a timestamptz.
func timestamptz(t store.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t.Time, InfinityModifier: pgtype.InfinityModifier(t.Inf), Valid: t.Valid}
}

// statementPages runs q with args in a transaction it rolls back, under
// EXPLAIN (ANALYZE, BUFFERS), and returns the buffers its index scans
// touched.
func statementPages(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	pages, found := testdb.ExplainBuffers(t, pool, q, args...).Pages("")
	if !found {
		t.Fatalf("the plan of %s has no index scan", q)
	}
	return pages
}

// claimPages runs the claim q from floor from, taking the rows swept by
// id, in a transaction it rolls back, under EXPLAIN (ANALYZE, BUFFERS),
// and returns the buffers its scans of pending_idx touched: index pages
// and the heap pages of the entries they checked.
func claimPages(t *testing.T, pool *pgxpool.Pool, q string, from store.Floor, swept [][16]byte) int {
	t.Helper()
	plan := testdb.ExplainBuffers(t, pool, q, claimArgs(from, swept))
	pages, found := plan.Pages("pending_idx")
	if !found {
		t.Fatalf("the claim's plan has no scan of pending_idx: %+v", plan)
	}
	return pages
}

// claimArgs are claim.sql's parameters for a claim of up to 100 rows of
// every topic, from floor from, taking the rows swept by id, as the store
// passes them on a plain table (pgstore's claimArgs).
func claimArgs(from store.Floor, swept [][16]byte) pgx.NamedArgs {
	return pgx.NamedArgs{"limit": 100, "owner": "test#1", "lease_ms": 30000, "from_due": timestamptz(from.Due), "from_id": from.ID,
		"all_ordered": false, "ordered_topics": []string{}, "lapsed": false, "lapsed_within_ms": nil, "swept": swept, "bound": nil,
		"batch_bytes": 4 << 20, "event_bytes": 16 << 20, "by_tid": true}
}

// pendingPayloads counts the pending rows whose payload is the bytea
// literal payload.
func pendingPayloads(t *testing.T, pool *pgxpool.Pool, table outbox.Table, payload string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Ident()+
		" WHERE status = 'pending' AND payload = $1::text::bytea", payload).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
