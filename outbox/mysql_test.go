package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"go.opentelemetry.io/otel/trace"
)

// mysqlBundle is a fresh database with the outbox table migrated by the
// MySQL migrations, and the default Writer's view of it.
type mysqlBundle struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	dsn string
}

func setupMySQL(t *testing.T) *mysqlBundle {
	t.Helper()
	db, dsn := mariadbtest.DB(t)
	ctx := context.Background()
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &mysqlBundle{t: t, ctx: ctx, db: db, dsn: dsn}
}

// begin starts a transaction rolled back at cleanup unless committed.
func (b *mysqlBundle) begin() *sql.Tx {
	b.t.Helper()
	tx, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// write commits msgs in one transaction and returns the results.
func (b *mysqlBundle) write(msgs ...outbox.Message) []outbox.Result {
	b.t.Helper()
	tx := b.begin()
	res, err := outbox.WriteBatch(b.ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.t.Fatal(err)
	}
	return res
}

// count counts the committed rows matching where.
func (b *mysqlBundle) count(where string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM outbox WHERE "+where, args...).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

type mysqlRow struct {
	Topic       string
	Key         []byte
	Payload     []byte
	Headers     map[string]string
	Status      string
	Attempt     int
	DedupKey    sql.NullString
	NextRetryAt time.Time
	CreatedAt   time.Time
}

func (b *mysqlBundle) row(id uuid.UUID) mysqlRow {
	b.t.Helper()
	var r mysqlRow
	var headers string
	err := b.db.QueryRowContext(b.ctx, "SELECT topic, `key`, payload, headers, status, attempt, dedup_key, next_retry_at, created_at FROM outbox WHERE id = ?", id[:]).
		Scan(&r.Topic, &r.Key, &r.Payload, &headers, &r.Status, &r.Attempt, &r.DedupKey, &r.NextRetryAt, &r.CreatedAt)
	if err != nil {
		b.t.Fatalf("row %v: %v", id, err)
	}
	if err := json.Unmarshal([]byte(headers), &r.Headers); err != nil {
		b.t.Fatalf("row %v: headers %q: %v", id, headers, err)
	}
	return r
}

// One message: rolled back it leaves nothing; committed it is a pending
// row holding everything the application set, with the database's times.
func TestMySQLWriteCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	msg := outbox.Message{Topic: "orders.created", Key: []byte("order-7"), Payload: []byte(`{"total":42}`),
		Headers: map[string]string{"content-type": "application/json", "trace": "abc"}}

	tx := b.begin()
	rolledBack, err := outbox.Write(b.ctx, outbox.FromMySQL(tx), msg)
	if err != nil || rolledBack.Duplicate || rolledBack.ID == uuid.Nil {
		t.Fatalf("Write = %+v, %v", rolledBack, err)
	}
	if n := b.count("id = ?", rolledBack.ID[:]); n != 0 {
		t.Fatalf("uncommitted row visible outside its transaction: %d", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := b.count("TRUE"); n != 0 {
		t.Fatalf("rolled-back Write left %d rows", n)
	}

	tx = b.begin()
	committed, err := outbox.Write(b.ctx, outbox.FromMySQL(tx), msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if committed.ID.Version() != 7 {
		t.Errorf("generated id %v is not a UUIDv7", committed.ID)
	}
	r := b.row(committed.ID)
	if r.Topic != msg.Topic || string(r.Key) != "order-7" || string(r.Payload) != `{"total":42}` ||
		len(r.Headers) != 2 || r.Headers["content-type"] != "application/json" || r.Headers["trace"] != "abc" ||
		r.Status != "pending" || r.Attempt != 0 || r.DedupKey.Valid {
		t.Errorf("stored row = %+v", r)
	}
	if d := time.Since(r.CreatedAt); d < -time.Minute || d > time.Minute || !r.NextRetryAt.Equal(r.CreatedAt) {
		t.Errorf("created_at %v, next_retry_at %v: want both the database's UTC now", r.CreatedAt, r.NextRetryAt)
	}
	if n := b.count("TRUE"); n != 1 {
		t.Errorf("table holds %d rows, want 1", n)
	}
}

// A batch stores every field of every message, nil key as NULL and empty
// headers as {}, and DeliverAt as next_retry_at.
func TestMySQLWriteBatchRoundTrip(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.FixedZone("CEST", 2*3600))
	msgs := []outbox.Message{
		{Topic: "orders", Key: []byte("k1"), Payload: []byte("p1"), Headers: map[string]string{"h": "välue ✓"}},
		{Topic: "audit", Payload: nil},
		{Topic: "later", Key: []byte{}, Payload: []byte{0, 1, 2, 0xff}, DeliverAt: at},
	}
	res := b.write(msgs...)
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	r0, r1, r2 := b.row(res[0].ID), b.row(res[1].ID), b.row(res[2].ID)
	if r0.Topic != "orders" || string(r0.Key) != "k1" || string(r0.Payload) != "p1" || r0.Headers["h"] != "välue ✓" {
		t.Errorf("row 0 = %+v", r0)
	}
	if r1.Topic != "audit" || r1.Key != nil || r1.Payload == nil || len(r1.Payload) != 0 || len(r1.Headers) != 0 {
		t.Errorf("row 1 = %+v (want NULL key, empty payload, {} headers)", r1)
	}
	if r2.Key == nil || len(r2.Key) != 0 || !bytes.Equal(r2.Payload, []byte{0, 1, 2, 0xff}) || !r2.NextRetryAt.Equal(at) {
		t.Errorf("row 2 = %+v (want empty key, binary payload, next_retry_at %v)", r2, at.UTC())
	}
	for i, r := range res {
		if r.Duplicate {
			t.Errorf("result %d is a duplicate", i)
		}
	}

	// DATETIME(6) holds the years 1000-9999: DeliverAt outside is clamped.
	past, err := outbox.Write(b.ctx, outbox.FromMySQL(b.db), outbox.Message{Topic: "t", DeliverAt: time.Date(500, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	future, err := outbox.Write(b.ctx, outbox.FromMySQL(b.db), outbox.Message{Topic: "t", DeliverAt: time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if at := b.row(past.ID).NextRetryAt; !at.Equal(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("DeliverAt in the year 500 stored as %v", at)
	}
	if at := b.row(future.ID).NextRetryAt; !at.Equal(time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)) {
		t.Errorf("DeliverAt in the year 20000 stored as %v", at)
	}
}

// A batch larger than one statement (by rows and by bytes) is written
// whole, in order, and a rollback takes all of it back.
func TestMySQLWriteBatchLargerThanAChunk(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	const n = 2500 // more than 2 chunks of 1024 rows
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "bulk", Payload: []byte(fmt.Sprint(i))}
		if i%10 == 0 {
			msgs[i].DedupKey = fmt.Sprint("bulk-", i)
		}
	}
	tx := b.begin()
	if _, err := outbox.WriteBatch(b.ctx, outbox.FromMySQL(tx), msgs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := b.count("TRUE"); got != 0 {
		t.Fatalf("rolled-back batch left %d rows", got)
	}

	res := b.write(msgs...)
	if got := b.count("topic = 'bulk'"); got != n {
		t.Fatalf("%d rows, want %d", got, n)
	}
	for i, r := range res {
		if r.Duplicate {
			t.Fatalf("result %d is a duplicate", i)
		}
		if i > 0 && bytes.Compare(res[i-1].ID[:], r.ID[:]) >= 0 {
			t.Fatalf("ids not increasing at %d: %v then %v", i, res[i-1].ID, r.ID)
		}
	}
	if p := string(b.row(res[n-1].ID).Payload); p != fmt.Sprint(n-1) {
		t.Errorf("last row's payload %q", p)
	}

	// 24 payloads of 1 MiB in one WriteBatch, beyond MariaDB's default
	// max_allowed_packet of 16 MiB, with interpolateParams=true, where the
	// driver sends each statement with its values as one packet.
	cfg, err := mysql.ParseDSN(b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams = true
	interpolating, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer interpolating.Close()
	var maxPacket int
	if err := interpolating.QueryRowContext(b.ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		t.Fatal(err)
	}
	big := make([]outbox.Message, maxPacket/outbox.DefaultMaxPayloadBytes+8)
	for i := range big {
		big[i] = outbox.Message{Topic: "big", Payload: bytes.Repeat([]byte{byte(i)}, outbox.DefaultMaxPayloadBytes)}
	}
	bigTx, err := interpolating.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bigTx.Rollback() //nolint:errcheck // no-op after Commit
	bigRes, err := outbox.WriteBatch(b.ctx, outbox.FromMySQL(bigTx), big)
	if err != nil {
		t.Fatalf("%d MiB in one WriteBatch (max_allowed_packet %d MiB): %v", len(big), maxPacket>>20, err)
	}
	if err := bigTx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := b.count("topic = 'big' AND LENGTH(payload) = ?", outbox.DefaultMaxPayloadBytes); got != len(big) {
		t.Fatalf("%d big rows, want %d", got, len(big))
	}
	last := len(big) - 1
	if p := b.row(bigRes[last].ID).Payload; p[0] != byte(last) || p[len(p)-1] != byte(last) {
		t.Errorf("big row %d holds %v...", last, p[:8])
	}
}

// The same DedupKey or ID twice, in one transaction or across two, writes
// one row; the later Write reports Duplicate with the existing row's id,
// and the transaction stays usable.
func TestMySQLDedupKey(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	msg := outbox.Message{Topic: "orders", Payload: []byte("one"), DedupKey: "order-42-created"}

	tx := b.begin()
	ex := outbox.FromMySQL(tx)
	first, err := outbox.Write(b.ctx, ex, msg)
	if err != nil || first.Duplicate {
		t.Fatalf("first Write = %+v, %v; want a fresh row", first, err)
	}
	second, err := outbox.Write(b.ctx, ex, msg)
	if err != nil || !second.Duplicate || second.ID != first.ID {
		t.Fatalf("second Write in the same tx = %+v, %v; want Duplicate with the first row's ID %v", second, err, first.ID)
	}
	sameID, err := outbox.Write(b.ctx, ex, outbox.Message{ID: first.ID, Topic: "orders", Payload: []byte("same id")})
	if err != nil || !sameID.Duplicate || sameID.ID != first.ID {
		t.Fatalf("Write with an existing ID = %+v, %v; want Duplicate", sameID, err)
	}
	// The same ID and the same key: the retry of a message with its own ID.
	retried, err := outbox.Write(b.ctx, ex, outbox.Message{ID: first.ID, Topic: "orders", Payload: []byte("one"), DedupKey: msg.DedupKey})
	if err != nil || !retried.Duplicate || retried.ID != first.ID {
		t.Fatalf("retry with its own ID = %+v, %v; want Duplicate", retried, err)
	}
	other, err := outbox.Write(b.ctx, ex, outbox.Message{Topic: "orders", Payload: []byte("other")})
	if err != nil || other.Duplicate {
		t.Fatalf("Write after a duplicate = %+v, %v", other, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after duplicates: %v", err)
	}

	tx2 := b.begin()
	again, err := outbox.Write(b.ctx, outbox.FromMySQL(tx2), outbox.Message{Topic: "orders", Payload: []byte("two"), DedupKey: msg.DedupKey})
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("Write in a later tx = %+v, %v; want Duplicate with the first row's ID %v", again, err, first.ID)
	}
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := b.count("dedup_key = ?", msg.DedupKey); n != 1 {
		t.Errorf("%d rows with the dedup key, want 1", n)
	}
	if r := b.row(first.ID); string(r.Payload) != "one" || r.DedupKey.String != msg.DedupKey {
		t.Errorf("a duplicate changed the row: %+v", r)
	}
	if n := b.count("TRUE"); n != 2 {
		t.Errorf("table holds %d rows, want 2", n)
	}
}

// WriteBatch marks exactly the duplicates, of earlier rows (by DedupKey or
// ID) and of earlier messages in the same batch, with the existing ids.
func TestMySQLWriteBatchMarksDuplicates(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	existing := b.write(outbox.Message{Topic: "orders", Payload: []byte("a"), DedupKey: "a"},
		outbox.Message{Topic: "orders", Payload: []byte("x")})
	ownID := uuid.Must(uuid.NewV7())

	msgs := []outbox.Message{
		{Topic: "orders", Payload: []byte("b"), DedupKey: "b"},
		{Topic: "orders", Payload: []byte("a again"), DedupKey: "a"},
		{Topic: "orders", Payload: []byte("no key")},
		{Topic: "orders", Payload: []byte("c"), DedupKey: "c"},
		{Topic: "orders", Payload: []byte("b again"), DedupKey: "b"},
		{ID: existing[1].ID, Topic: "orders", Payload: []byte("x again")},
		{ID: ownID, Topic: "orders", Payload: []byte("own id"), DedupKey: "d"},
		{Topic: "orders", Payload: []byte("d again"), DedupKey: "d"},
		{ID: ownID, Topic: "orders", Payload: []byte("own id again")},
		{Topic: "orders", Payload: []byte("A"), DedupKey: "A"}, // keys are case-sensitive
	}
	want := []bool{false, true, false, false, true, true, false, true, true, false}
	tx := b.begin()
	res, err := outbox.WriteBatch(b.ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res), len(msgs))
	}
	for i, r := range res {
		if r.Duplicate != want[i] {
			t.Errorf("result %d (%q): Duplicate = %v, want %v", i, msgs[i].Payload, r.Duplicate, want[i])
		}
		if n := b.count("id = ?", r.ID[:]); n != 1 {
			t.Errorf("result %d (%q): %d rows with its ID %v, want 1", i, msgs[i].Payload, n, r.ID)
		}
	}
	for dup, orig := range map[int]uuid.UUID{1: existing[0].ID, 4: res[0].ID, 5: existing[1].ID, 7: ownID, 8: ownID} {
		if res[dup].ID != orig {
			t.Errorf("result %d: ID %v, want the original row's %v", dup, res[dup].ID, orig)
		}
	}
	if res[6].ID != ownID {
		t.Errorf("message with its own ID stored as %v, want %v", res[6].ID, ownID)
	}
	if n := b.count("TRUE"); n != 2+5 {
		t.Errorf("table holds %d rows, want 7", n)
	}
	if r := b.row(res[0].ID); string(r.Payload) != "b" {
		t.Errorf("the later duplicate overwrote the first: %q", r.Payload)
	}
}

// A dedup key written by a transaction still open: the second writer waits
// for it and, once it commits, gets Duplicate with its id; had it rolled
// back, the second writer's row would be written.
func TestMySQLDedupKeyAcrossOpenTransactions(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	for _, commitFirst := range []bool{true, false} {
		key := fmt.Sprint("concurrent-", commitFirst)
		tx1 := b.begin()
		first, err := outbox.Write(b.ctx, outbox.FromMySQL(tx1), outbox.Message{Topic: "orders", DedupKey: key})
		if err != nil {
			t.Fatal(err)
		}
		tx2 := b.begin()
		var conn int64
		// Reading the table fixes tx2's REPEATABLE READ snapshot before tx1
		// commits: the writer must not rely on a plain read to find tx1's row.
		if err := tx2.QueryRowContext(b.ctx, "SELECT CONNECTION_ID() FROM outbox UNION ALL SELECT CONNECTION_ID() LIMIT 1").Scan(&conn); err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			res outbox.Result
			err error
		}
		done := make(chan outcome, 1)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			res, err := outbox.WriteBatch(b.ctx, outbox.FromMySQL(tx2), []outbox.Message{{Topic: "orders", DedupKey: key}})
			if err != nil {
				done <- outcome{err: err}
				return
			}
			done <- outcome{res: res[0]}
		}()
		// The second writer blocks on the first's row lock: await that,
		// rather than sleeping.
		awaitLockWait(t, b, conn, finished)
		if commitFirst {
			err = tx1.Commit()
		} else {
			err = tx1.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		o := <-done
		if o.err != nil {
			t.Fatal(o.err)
		}
		if err := tx2.Commit(); err != nil {
			t.Fatal(err)
		}
		if commitFirst && (!o.res.Duplicate || o.res.ID != first.ID) {
			t.Errorf("after the first committed: %+v, want Duplicate of %v", o.res, first.ID)
		}
		if !commitFirst && (o.res.Duplicate || o.res.ID == first.ID) {
			t.Errorf("after the first rolled back: %+v, want a fresh row", o.res)
		}
		if n := b.count("dedup_key = ?", key); n != 1 {
			t.Errorf("%d rows with key %q, want 1", n, key)
		}
	}
}

// awaitLockWait waits until connection conn is running an INSERT that
// cannot finish because another transaction holds the key (the caller
// checks that it did not finish). INNODB_TRX is not used: on MariaDB 10.11
// its trx_mysql_thread_id was seen to differ from CONNECTION_ID().
func awaitLockWait(t *testing.T, b *mysqlBundle, conn int64, finished <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM information_schema.processlist WHERE id = ? AND info LIKE 'INSERT INTO%'", conn).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-finished:
			t.Fatal("the second writer finished while the first held the dedup key")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second writer never started its INSERT")
		}
		time.Sleep(5 * time.Millisecond) // polling the server; nothing to wait on
	}
}

// The span of Write's ctx is stored as traceparent and tracestate beside
// the message's own headers; a traceparent the message sets is kept.
func TestMySQLTraceContextHeaders(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	ts, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
		Remote:     true,
	})
	ctx := trace.ContextWithRemoteSpanContext(b.ctx, sc)
	own := "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"
	tx := b.begin()
	ex := outbox.FromMySQL(tx)
	one, err := outbox.Write(ctx, ex, outbox.Message{Topic: "orders", Headers: map[string]string{"h": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := outbox.WriteBatch(ctx, ex, []outbox.Message{{Topic: "orders"}, {Topic: "orders", Headers: map[string]string{"traceparent": own}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if h := b.row(one.ID).Headers; len(h) != 3 || h["h"] != "v" || h["traceparent"] != want || h["tracestate"] != "vendor=value" {
		t.Errorf("Write stored headers %v, want h, traceparent %s and tracestate", h, want)
	}
	if h := b.row(batch[0].ID).Headers; len(h) != 2 || h["traceparent"] != want {
		t.Errorf("WriteBatch stored headers %v, want traceparent %s and tracestate", h, want)
	}
	if h := b.row(batch[1].ID).Headers; len(h) != 1 || h["traceparent"] != own {
		t.Errorf("explicit traceparent stored as %v, want it kept alone", h)
	}
}

// Invalid messages get the same typed errors as on PostgreSQL, before any
// SQL: nothing is written and the transaction stays usable.
func TestMySQLWriterValidation(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	small, err := outbox.NewWriter(outbox.WriterConfig{MaxPayloadBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	ok := outbox.Message{Topic: "orders", Payload: []byte("fine")}
	cases := []struct {
		name  string
		msg   outbox.Message
		want  error
		field string
	}{
		{"empty topic", outbox.Message{Payload: []byte("x")}, outbox.ErrInvalidTopic, "topic"},
		{"topic with space", outbox.Message{Topic: "my topic"}, outbox.ErrInvalidTopic, "topic"},
		{"topic too long", outbox.Message{Topic: strings.Repeat("t", outbox.MaxTopicLen+1)}, outbox.ErrInvalidTopic, "topic"},
		{"payload over max", outbox.Message{Topic: "orders", Payload: make([]byte, 17)}, outbox.ErrPayloadTooLarge, "payload"},
		{"header name with colon", outbox.Message{Topic: "orders", Headers: map[string]string{"a:b": "v"}}, outbox.ErrInvalidHeader, "headers"},
		{"reserved header", outbox.Message{Topic: "orders", Headers: map[string]string{outbox.HeaderEventID: "forged"}}, outbox.ErrInvalidHeader, "headers"},
		{"header value invalid UTF-8", outbox.Message{Topic: "orders", Headers: map[string]string{"h": "\xff\xfe"}}, outbox.ErrInvalidHeader, "headers"},
		{"header value with NUL", outbox.Message{Topic: "orders", Headers: map[string]string{"h": "a\x00b"}}, outbox.ErrInvalidHeader, "headers"},
		{"dedup key too long", outbox.Message{Topic: "orders", DedupKey: strings.Repeat("d", outbox.MaxDedupKeyLen+1)}, outbox.ErrInvalidDedupKey, "dedup_key"},
		{"dedup key invalid UTF-8", outbox.Message{Topic: "orders", DedupKey: "\xff"}, outbox.ErrInvalidDedupKey, "dedup_key"},
	}
	tx := b.begin()
	ex := outbox.FromMySQL(tx)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := small.Write(b.ctx, ex, tc.msg)
			checkMySQLValidation(t, "Write", err, tc.want, tc.field, 0)
			res, err := small.WriteBatch(b.ctx, ex, []outbox.Message{ok, ok, tc.msg, ok})
			if res != nil {
				t.Errorf("WriteBatch returned results %v with an error", res)
			}
			checkMySQLValidation(t, "WriteBatch", err, tc.want, tc.field, 2)
		})
	}
	// The limits themselves are accepted, and the transaction is usable.
	edge := []outbox.Message{
		{Topic: strings.Repeat("t", outbox.MaxTopicLen), Payload: make([]byte, 16)},
		{Topic: "a-Z_0.9", Headers: map[string]string{strings.Repeat("h", 255): "välue ✓", "x-trace~id!": ""},
			DedupKey: strings.Repeat("ü", outbox.MaxDedupKeyLen/2)},
	}
	if _, err := small.WriteBatch(b.ctx, ex, edge); err != nil {
		t.Fatalf("messages at the limits rejected: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := b.count("TRUE"); n != 2 {
		t.Errorf("table holds %d rows, want only the 2 at the limits", n)
	}
}

func checkMySQLValidation(t *testing.T, call string, err, want error, field string, index int) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want errors.Is %v", call, err, want)
	}
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%s: error %v (%T) is not a *outbox.ValidationError", call, err, err)
	}
	if ve.Index != index || ve.Field != field || ve.Reason == "" {
		t.Errorf("%s: ValidationError{Index %d, Field %q, Reason %q}, want Index %d, Field %q and a reason", call, ve.Index, ve.Field, ve.Reason, index, field)
	}
}

// Table.Schema names a database on MySQL; a Writer for another table
// writes there, and a missing table is an error naming it.
func TestMySQLWriterTable(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	var dbName string
	if err := b.db.QueryRowContext(b.ctx, "SELECT DATABASE()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	events := outbox.Table{Schema: dbName, Name: "events"}
	if _, err := migrations.UpMySQL(b.ctx, b.db, events); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: events})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteBatch(b.ctx, outbox.FromMySQL(b.db), []outbox.Message{{Topic: "t"}, {Topic: "t", DedupKey: "k"}}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM events").Scan(&n); err != nil || n != 2 {
		t.Errorf("events holds %d rows (%v), want 2", n, err)
	}
	if n := b.count("TRUE"); n != 0 {
		t.Errorf("default table holds %d rows, want 0", n)
	}

	missing, err := outbox.NewWriter(outbox.WriterConfig{Table: outbox.Table{Name: "nowhere"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Write(b.ctx, outbox.FromMySQL(b.db), outbox.Message{Topic: "t"}); err == nil || !strings.Contains(err.Error(), "`nowhere`") {
		t.Errorf("Write to a missing table: %v, want an error naming it", err)
	}
}

// A key longer than the BLOB column holds is refused by the server, not
// truncated, and the writer wraps the driver's error.
func TestMySQLKeyTooLongForBlob(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	tx := b.begin()
	_, err := outbox.Write(b.ctx, outbox.FromMySQL(tx), outbox.Message{Topic: "orders", Key: make([]byte, 65536)})
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) || myErr.Number != 1406 || !strings.Contains(err.Error(), "insert into `outbox`") {
		t.Fatalf("Write with a 65,536-byte key: %v, want the server's 1406 Data too long, wrapped", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Write(b.ctx, outbox.FromMySQL(b.db), outbox.Message{Topic: "orders", Key: make([]byte, 65535)}); err != nil {
		t.Fatalf("Write with a 65,535-byte key: %v", err)
	}
	if n := b.count("LENGTH(`key`) = 65535"); n != 1 {
		t.Errorf("%d rows with the longest key, want 1", n)
	}
}

// Concurrent writers whose batches share dedup keys, in random order,
// neither deadlock (InnoDB error 1213) nor duplicate a key, and every
// result names the row that holds its message's key.
func TestMySQLConcurrentBatchesSharingDedupKeys(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	const writers, txs, batch, keys = 4, 60, 20, 600
	type written struct {
		key string
		id  uuid.UUID
	}
	results := make([][]written, writers)
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range txs {
				msgs := make([]outbox.Message, batch)
				for j := range msgs {
					msgs[j] = outbox.Message{Topic: "t", DedupKey: fmt.Sprint("k", rng.IntN(keys))}
				}
				tx, err := b.db.BeginTx(b.ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				res, err := outbox.WriteBatch(b.ctx, outbox.FromMySQL(tx), msgs)
				if err != nil {
					_ = tx.Rollback()
					errs <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
				for j, r := range res {
					results[w] = append(results[w], written{msgs[j].DedupKey, r.ID})
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	holders := map[string]uuid.UUID{}
	rows, err := b.db.QueryContext(b.ctx, "SELECT dedup_key, id FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var id []byte
		if err := rows.Scan(&key, &id); err != nil {
			t.Fatal(err)
		}
		if _, dup := holders[key]; dup {
			t.Fatalf("key %q held by two rows", key)
		}
		holders[key] = uuid.UUID(id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for w := range results {
		for _, r := range results[w] {
			if holders[r.key] != r.id {
				t.Fatalf("result for key %q names %v, the row holding it is %v", r.key, r.id, holders[r.key])
			}
		}
	}
}
