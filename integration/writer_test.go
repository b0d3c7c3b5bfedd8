package integration

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// A message written in a committed transaction exists as a pending row
// with everything the application set; a rolled-back one leaves nothing.
func TestWriteCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msg := outbox.Message{Topic: "orders.created", Key: []byte("order-7"), Payload: []byte(`{"total":42}`),
		Headers: map[string]string{"content-type": "application/json", "trace": "abc"}}

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack, err := b.writer.Write(b.ctx, tx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count("id = $1", rolledBack.ID); n != 0 {
		t.Fatalf("rolled-back message left %d rows", n)
	}

	id := b.write(msg)[0]
	r := b.row(id)
	if r.Topic != msg.Topic || string(r.Key) != "order-7" || string(r.Payload) != `{"total":42}` ||
		r.Headers != `{"trace": "abc", "content-type": "application/json"}` || r.Status != "pending" || r.Attempt != 0 {
		t.Errorf("stored row = %+v", r)
	}
	if b.count("true") != 1 {
		t.Errorf("table holds %d rows, want 1", b.count("true"))
	}
}

// The same DedupKey (or ID) twice, in one transaction or across two, writes
// one row; the second Write reports Duplicate and the caller's transaction
// stays usable.
func TestDedupKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msg := outbox.Message{Topic: "orders", Payload: []byte("one"), DedupKey: "order-42-created"}

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	first, err := b.writer.Write(b.ctx, tx, msg)
	if err != nil || first.Duplicate {
		t.Fatalf("first Write = %+v, %v; want a fresh row", first, err)
	}
	second, err := b.writer.Write(b.ctx, tx, msg)
	if err != nil || !second.Duplicate || second.ID != first.ID {
		t.Fatalf("second Write in the same tx = %+v, %v; want Duplicate with the first row's ID %v", second, err, first.ID)
	}
	sameID, err := b.writer.Write(b.ctx, tx, outbox.Message{ID: first.ID, Topic: "orders", Payload: []byte("same id")})
	if err != nil || !sameID.Duplicate {
		t.Fatalf("Write with an existing ID = %+v, %v; want Duplicate", sameID, err)
	}
	// The transaction is still usable.
	var one int
	if err := tx.QueryRow(b.ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("statement after a duplicate: %v", err)
	}
	other, err := b.writer.Write(b.ctx, tx, outbox.Message{Topic: "orders", Payload: []byte("other")})
	if err != nil || other.Duplicate {
		t.Fatalf("Write after a duplicate = %+v, %v", other, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit after a duplicate: %v", err)
	}

	tx2, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(b.ctx) //nolint:errcheck
	again, err := b.writer.Write(b.ctx, tx2, outbox.Message{Topic: "orders", Payload: []byte("two"), DedupKey: msg.DedupKey})
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("Write in a later tx = %+v, %v; want Duplicate with the first row's ID %v", again, err, first.ID)
	}
	if _, err := tx2.Exec(b.ctx, b.sql("UPDATE {{table}} SET attempt = attempt WHERE id = $1"), first.ID); err != nil {
		t.Fatalf("statement after a duplicate: %v", err)
	}
	if err := tx2.Commit(b.ctx); err != nil {
		t.Fatalf("commit after a duplicate: %v", err)
	}

	if n := b.count("dedup_key = $1", msg.DedupKey); n != 1 {
		t.Errorf("%d rows with the dedup key, want 1", n)
	}
	if r := b.row(first.ID); string(r.Payload) != "one" {
		t.Errorf("duplicate overwrote the row: payload %q", r.Payload)
	}
	if n := b.count("true"); n != 2 {
		t.Errorf("table holds %d rows, want 2", n)
	}
}

// WriteBatch marks exactly the duplicates: of earlier rows (by DedupKey or
// ID) and of earlier messages in the same batch.
func TestWriteBatchMarksDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	existing := b.write(outbox.Message{Topic: "orders", Payload: []byte("a"), DedupKey: "a"},
		outbox.Message{Topic: "orders", Payload: []byte("x")})

	msgs := []outbox.Message{
		{Topic: "orders", Payload: []byte("b"), DedupKey: "b"},
		{Topic: "orders", Payload: []byte("a again"), DedupKey: "a"},
		{Topic: "orders", Payload: []byte("no key")},
		{Topic: "orders", Payload: []byte("c"), DedupKey: "c"},
		{Topic: "orders", Payload: []byte("b again"), DedupKey: "b"},
		{ID: existing[1], Topic: "orders", Payload: []byte("x again")},
	}
	want := []bool{false, true, false, false, true, true}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	res, err := b.writer.WriteBatch(b.ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "SELECT 1"); err != nil {
		t.Fatalf("tx unusable after duplicates: %v", err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res), len(msgs))
	}
	for i, r := range res {
		if r.Duplicate != want[i] {
			t.Errorf("result %d (%q): Duplicate = %v, want %v", i, msgs[i].Payload, r.Duplicate, want[i])
		}
		if r.ID == uuid.Nil {
			t.Errorf("result %d has no ID", i)
		}
		// A duplicate reports the id of the row already in the table.
		if n := b.count("id = $1", r.ID); n != 1 {
			t.Errorf("result %d (%q): %d rows with its ID, want 1", i, msgs[i].Payload, n)
		}
	}
	for dup, orig := range map[int]uuid.UUID{1: existing[0], 4: res[0].ID, 5: existing[1]} {
		if res[dup].ID != orig {
			t.Errorf("result %d: ID %v, want the original row's %v", dup, res[dup].ID, orig)
		}
	}
	if n := b.count("true"); n != 2+3 {
		t.Errorf("table holds %d rows, want 5", n)
	}
}

// WriteBatch without dedup keys (the COPY path) stores every field.
func TestWriteBatchCopyRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgs := []outbox.Message{
		{Topic: "orders", Key: []byte("k1"), Payload: []byte("p1"), Headers: map[string]string{"h": "v1"}},
		{Topic: "audit", Payload: []byte("p2")},
	}
	res, err := b.writer.WriteBatch(b.ctx, b.pool, msgs)
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := b.row(res[0].ID), b.row(res[1].ID)
	if r0.Topic != "orders" || string(r0.Key) != "k1" || string(r0.Payload) != "p1" || r0.Headers != `{"h": "v1"}` || r0.Status != "pending" {
		t.Errorf("row 0 = %+v", r0)
	}
	if r1.Topic != "audit" || r1.Key != nil || string(r1.Payload) != "p2" || r1.Headers != `{}` || r1.DedupKey != nil {
		t.Errorf("row 1 = %+v", r1)
	}
	if res[0].Duplicate || res[1].Duplicate {
		t.Errorf("fresh rows flagged as duplicates: %+v", res)
	}
}

// Invalid messages are rejected before any SQL with the right sentinel and
// a *ValidationError naming the field and the batch index; nothing is
// written.
func TestWriterValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small, err := outbox.NewWriter(outbox.WriterConfig{Table: b.table, MaxPayloadBytes: 16})
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
		{"topic with slash", outbox.Message{Topic: "a/b"}, outbox.ErrInvalidTopic, "topic"},
		{"topic with unicode", outbox.Message{Topic: "ordérs"}, outbox.ErrInvalidTopic, "topic"},
		{"topic dot", outbox.Message{Topic: ".."}, outbox.ErrInvalidTopic, "topic"},
		{"topic too long", outbox.Message{Topic: strings.Repeat("t", outbox.MaxTopicLen+1)}, outbox.ErrInvalidTopic, "topic"},
		{"payload over max", outbox.Message{Topic: "orders", Payload: make([]byte, 17)}, outbox.ErrPayloadTooLarge, "payload"},
		{"empty header name", outbox.Message{Topic: "orders", Headers: map[string]string{"": "v"}}, outbox.ErrInvalidHeader, "headers"},
		{"header name with colon", outbox.Message{Topic: "orders", Headers: map[string]string{"a:b": "v"}}, outbox.ErrInvalidHeader, "headers"},
		{"header name with space", outbox.Message{Topic: "orders", Headers: map[string]string{"a b": "v"}}, outbox.ErrInvalidHeader, "headers"},
		{"header name too long", outbox.Message{Topic: "orders", Headers: map[string]string{strings.Repeat("h", 256): "v"}}, outbox.ErrInvalidHeader, "headers"},
		{"reserved header", outbox.Message{Topic: "orders", Headers: map[string]string{outbox.HeaderEventID: "forged"}}, outbox.ErrInvalidHeader, "headers"},
		{"header value invalid UTF-8", outbox.Message{Topic: "orders", Headers: map[string]string{"h": "\xff\xfe"}}, outbox.ErrInvalidHeader, "headers"},
		{"header value with NUL", outbox.Message{Topic: "orders", Headers: map[string]string{"h": "a\x00b"}}, outbox.ErrInvalidHeader, "headers"},
		{"dedup key too long", outbox.Message{Topic: "orders", DedupKey: strings.Repeat("d", outbox.MaxDedupKeyLen+1)}, outbox.ErrInvalidDedupKey, "dedup_key"},
		{"dedup key invalid UTF-8", outbox.Message{Topic: "orders", DedupKey: "\xff"}, outbox.ErrInvalidDedupKey, "dedup_key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := small.Write(b.ctx, b.pool, tc.msg)
			checkValidation(t, "Write", err, tc.want, tc.field, 0)

			batch := []outbox.Message{ok, ok, tc.msg, ok}
			res, err := small.WriteBatch(b.ctx, b.pool, batch)
			if res != nil {
				t.Errorf("WriteBatch returned results %v with an error", res)
			}
			checkValidation(t, "WriteBatch", err, tc.want, tc.field, 2)
		})
	}
	if n := b.count("true"); n != 0 {
		t.Errorf("invalid writes left %d rows", n)
	}

	// The limits themselves are accepted.
	edge := []outbox.Message{
		{Topic: strings.Repeat("t", outbox.MaxTopicLen), Payload: make([]byte, 16)},
		{Topic: "a-Z_0.9", Headers: map[string]string{strings.Repeat("h", 255): "välue ✓", "x-trace~id!": ""}, DedupKey: strings.Repeat("d", outbox.MaxDedupKeyLen)},
	}
	if _, err := small.WriteBatch(b.ctx, b.pool, edge); err != nil {
		t.Errorf("messages at the limits rejected: %v", err)
	}
	if n := b.count("true"); n != 2 {
		t.Errorf("%d rows written at the limits, want 2", n)
	}

	// Table names are validated too.
	for _, tbl := range []outbox.Table{{Schema: "public", Name: "out;box"}, {Schema: `a"b`}, {Name: strings.Repeat("n", 41)}} {
		if _, err := outbox.NewWriter(outbox.WriterConfig{Table: tbl}); !errors.Is(err, outbox.ErrInvalidIdentifier) {
			t.Errorf("NewWriter(%+v) = %v, want ErrInvalidIdentifier", tbl, err)
		}
	}
	if _, err := outbox.NewWriter(outbox.WriterConfig{MaxPayloadBytes: -1}); err == nil {
		t.Error("NewWriter accepted a negative MaxPayloadBytes")
	}
}

func checkValidation(t *testing.T, call string, err, want error, field string, index int) {
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

// The database/sql adapter: Write and WriteBatch work inside a *sql.Tx of
// the pgx stdlib driver, with commit, rollback and duplicates.
func TestDatabaseSQLAdapter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := sql.Open("pgx", testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	tx, err := db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := b.writer.Write(b.ctx, outbox.FromSQL(tx), outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("committed"),
		Headers: map[string]string{"h": "v"}, DedupKey: "sql-1"})
	if err != nil || committed.Duplicate {
		t.Fatalf("Write = %+v, %v", committed, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := b.row(committed.ID)
	if string(r.Payload) != "committed" || string(r.Key) != "k" || r.Headers != `{"h": "v"}` || deref(r.DedupKey) != "sql-1" {
		t.Errorf("row written through database/sql = %+v", r)
	}

	tx, err = db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack, err := b.writer.Write(b.ctx, outbox.FromSQL(tx), outbox.Message{Topic: "orders", Payload: []byte("rolled back")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := b.count("id = $1", rolledBack.ID); n != 0 {
		t.Errorf("rolled-back Write left %d rows", n)
	}

	tx, err = db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	dup, err := b.writer.Write(b.ctx, outbox.FromSQL(tx), outbox.Message{Topic: "orders", Payload: []byte("again"), DedupKey: "sql-1"})
	if err != nil || !dup.Duplicate {
		t.Errorf("duplicate Write = %+v, %v; want Duplicate", dup, err)
	}
	res, err := b.writer.WriteBatch(b.ctx, outbox.FromSQL(tx), []outbox.Message{
		{Topic: "orders", Payload: []byte("new"), DedupKey: "sql-2"},
		{Topic: "orders", Payload: []byte("dup"), DedupKey: "sql-1"},
		{Topic: "orders", Payload: []byte("plain")},
	})
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	if len(res) != 3 || res[0].Duplicate || !res[1].Duplicate || res[2].Duplicate {
		t.Errorf("WriteBatch results = %+v, want only the second a duplicate", res)
	}
	plain, err := b.writer.WriteBatch(b.ctx, outbox.FromSQL(tx), []outbox.Message{{Topic: "orders", Payload: []byte("p1")}, {Topic: "orders", Payload: []byte("p2")}})
	if err != nil || len(plain) != 2 {
		t.Fatalf("WriteBatch without keys = %+v, %v", plain, err)
	}
	if _, err := tx.ExecContext(b.ctx, "SELECT 1"); err != nil {
		t.Fatalf("tx unusable after a duplicate: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := b.count("true"); n != 1+2+2 {
		t.Errorf("table holds %d rows, want 5", n)
	}
}
