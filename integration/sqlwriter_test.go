package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// idTime is the unix time in milliseconds held in the first 48 bits of a
// UUIDv7.
func idTime(id uuid.UUID) time.Time {
	var b [8]byte
	copy(b[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:])))
}

// Migration 006: a plain-SQL INSERT that gives only topic, key and payload
// works; the ids of one transaction strictly increase in insertion order
// whatever the statement (single-row INSERTs, one multi-row VALUES, INSERT
// ... SELECT ... ORDER BY, COPY), even when the clock reads earlier than
// an id already handed out in the transaction; they are UUIDv7 holding the
// database time of the insert; a role with nothing but INSERT on the table
// can use the default; the migration does not rewrite the table; down
// removes the default and its objects.
func TestSQLWriterIDDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// The bare minimum: the other columns take their defaults.
	var id uuid.UUID
	if err := b.pool.QueryRow(b.ctx, b.sql(`INSERT INTO {{table}} (topic, key, payload) VALUES ('orders', convert_to('k', 'UTF8'), 'x') RETURNING id`)).Scan(&id); err != nil {
		t.Fatalf("INSERT with only topic, key and payload: %v", err)
	}
	r := b.row(id)
	if r.Status != "pending" || r.Headers != "{}" || r.Attempt != 0 || r.DedupKey != nil || string(r.Key) != "k" {
		t.Errorf("row written by plain SQL: %+v; want pending, headers {}, attempt 0, no dedup key, key k", r)
	}

	// Many inserts in one transaction, in four forms; payload = insertion
	// order.
	before := b.dbNow()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // no-op after commit
	seq := 0
	for range 20 {
		if _, err := tx.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, key, payload) VALUES ('orders', 'k', convert_to($1, 'UTF8'))`), strconv.Itoa(seq)); err != nil {
			t.Fatalf("single-row INSERT: %v", err)
		}
		seq++
	}
	var values []string
	var args []any
	for i := range 200 {
		values = append(values, fmt.Sprintf("('orders', 'k', convert_to($%d, 'UTF8'))", i+1))
		args = append(args, strconv.Itoa(seq))
		seq++
	}
	if _, err := tx.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, key, payload) VALUES `+strings.Join(values, ", ")), args...); err != nil {
		t.Fatalf("multi-row INSERT: %v", err)
	}
	if _, err := tx.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, key, payload)
SELECT 'orders', 'k', convert_to(($1 + g)::text, 'UTF8') FROM generate_series(0, 199) AS g ORDER BY g`), seq); err != nil {
		t.Fatalf("INSERT ... SELECT: %v", err)
	}
	seq += 200
	var copyRows [][]any
	for range 200 {
		copyRows = append(copyRows, []any{"orders", []byte("k"), []byte(strconv.Itoa(seq))})
		seq++
	}
	if _, err := tx.CopyFrom(b.ctx, pgx.Identifier{b.table.Schema, b.table.Name}, []string{"topic", "key", "payload"}, pgx.CopyFromRows(copyRows)); err != nil {
		t.Fatalf("COPY: %v", err)
	}
	var txid string
	if err := tx.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text").Scan(&txid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	after := b.dbNow()
	rows := b.rows("tx::text = $1", txid) // by id
	if len(rows) != seq {
		t.Fatalf("transaction wrote %d rows, want %d", len(rows), seq)
	}
	misplaced, malformed := 0, 0
	for i, r := range rows {
		if got := string(r.Payload); got != strconv.Itoa(i) {
			if misplaced++; misplaced <= 5 {
				t.Errorf("row #%d by id holds insert #%s", i, got)
			}
		}
		at := idTime(r.ID)
		if r.ID.Version() != 7 || r.ID.Variant() != uuid.RFC4122 || at.Before(before.Truncate(time.Millisecond)) || at.After(after) {
			if malformed++; malformed <= 5 {
				t.Errorf("id %s: version %d, variant %v, time %v; want 7, RFC 4122, within the transaction [%v, %v]",
					r.ID, r.ID.Version(), r.ID.Variant(), at, before, after)
			}
		}
	}
	if misplaced > 0 || malformed > 0 {
		t.Errorf("of %d ids, %d out of insertion order, %d not UUIDv7 of the insert's time", seq, misplaced, malformed)
	}

	// The clock reads earlier than the latest id of the transaction (set
	// an hour ahead here, as if the clock had stepped back an hour since):
	// later ids keep that time and still increase.
	tx, err = b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // no-op after commit
	var first, ahead uuid.UUID
	if err := tx.QueryRow(b.ctx, b.sql(`INSERT INTO {{table}} (topic, payload) VALUES ('orders', 'x') RETURNING id`)).Scan(&first); err != nil {
		t.Fatal(err)
	}
	later := time.UnixMilli(idTime(first).UnixMilli() + time.Hour.Milliseconds())
	if _, err := tx.Exec(b.ctx, "SELECT set_config('outboxrelay.id_time', $1, true)", strconv.FormatInt(later.UnixMilli()<<12, 10)); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(b.ctx, b.sql(`INSERT INTO {{table}} (topic, payload) VALUES ('orders', 'x') RETURNING id`)).Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	var next []uuid.UUID
	rs, err := tx.Query(b.ctx, b.sql(`INSERT INTO {{table}} (topic, payload) VALUES ('orders', 'x'), ('orders', 'x') RETURNING id`))
	if err != nil {
		t.Fatal(err)
	}
	if next, err = pgx.CollectRows(rs, pgx.RowTo[uuid.UUID]); err != nil || len(next) != 2 {
		t.Fatalf("RETURNING ids = %v, %v", next, err)
	}
	ids := append([]uuid.UUID{first, ahead}, next...)
	for i := 1; i < len(ids); i++ {
		if bytes.Compare(ids[i-1][:], ids[i][:]) >= 0 {
			t.Errorf("after the clock fell behind: id #%d %s is not above #%d %s", i, ids[i], i-1, ids[i-1])
		}
	}
	for _, id := range ids[1:] {
		if !idTime(id).Equal(later) {
			t.Errorf("id %s holds %v, want the latest time of the transaction, %v", id, idTime(id), later)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}

	// A writer role with USAGE on the schema and INSERT on the table, and
	// no grant on the sequence.
	role := b.newWriterRole()
	tx, err = b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(b.ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, payload) VALUES ('orders', 'as a writer role')`)); err != nil {
		t.Fatalf("INSERT as a role with only INSERT on the table: %v", err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}

	// Down: the default, its function and its sequence are gone, and an
	// INSERT without id fails as before.
	for {
		reverted, ok, err := migrations.Down(b.ctx, b.pool, b.table)
		if err != nil || !ok || reverted.Version < 6 {
			t.Fatalf("Down = %d, %v, %v; want 006 (or a later one) reverted", reverted.Version, ok, err)
		}
		if reverted.Version == 6 {
			break
		}
	}
	var seqExists, fnExists bool
	if err := b.pool.QueryRow(b.ctx, "SELECT to_regclass($1) IS NOT NULL, to_regprocedure($2) IS NOT NULL",
		b.table.Related("id_seq"), b.table.Related("new_id")+"()").Scan(&seqExists, &fnExists); err != nil || seqExists || fnExists {
		t.Errorf("after Down: sequence exists %v, function exists %v (%v); want neither", seqExists, fnExists, err)
	}
	_, err = b.pool.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, payload) VALUES ('orders', 'x')`))
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23502" || pgErr.ColumnName != "id" {
		t.Errorf("INSERT without id after Down = %v, want a not-null violation on id", err)
	}

	// Up again on a table with rows: the catalog changes, the table is not
	// rewritten (same file) and its rows keep their ids.
	var fileBefore, fileAfter string
	if err := b.pool.QueryRow(b.ctx, fileNodes, b.table.Ident()).Scan(&fileBefore); err != nil {
		t.Fatal(err)
	}
	n := b.count("true")
	if applied, err := migrations.Up(b.ctx, b.pool, b.table); err != nil || len(applied) == 0 || applied[0].Version != 6 {
		t.Fatalf("Up = %v, %v; want 006 applied", applied, err)
	}
	if err := b.pool.QueryRow(b.ctx, fileNodes, b.table.Ident()).Scan(&fileAfter); err != nil {
		t.Fatal(err)
	}
	if fileAfter != fileBefore {
		t.Errorf("migration 006 rewrote the table (file nodes %s -> %s)", fileBefore, fileAfter)
	}
	var known []string
	for _, id := range ids {
		known = append(known, id.String())
	}
	if got := b.count("id = ANY($1::uuid[])", known); got != len(ids) || b.count("true") != n {
		t.Errorf("after Up again: %d of %d known ids, %d rows (want %d)", got, len(ids), b.count("true"), n)
	}
	if _, err := b.pool.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, payload) VALUES ('orders', 'x')`)); err != nil {
		t.Errorf("INSERT without id after Up again: %v", err)
	}
}

// newWriterRole creates a role that may only insert into the test's table
// (and use its schema), dropped when the test ends.
func (b *bundle) newWriterRole() string {
	b.t.Helper()
	role := "outbox_writer_" + strings.TrimPrefix(b.table.Schema, "test_")
	ident := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + ident,
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{b.table.Schema}.Sanitize() + " TO " + ident,
		"GRANT INSERT ON " + b.table.Ident() + " TO " + ident,
	} {
		b.exec(stmt)
	}
	b.t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + ident, "DROP ROLE " + ident} {
			if _, err := b.pool.Exec(context.Background(), stmt); err != nil {
				b.t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	return role
}

// Rows written with plain SQL only, without ids, several per key in each
// transaction (single-row INSERTs and multi-row VALUES, keys interleaved),
// by concurrent transactions, reach Kafka through three ordered relays in
// insertion order per key, none lost, none twice; kcat reads them back.
func TestSQLWriterOrderedDeliveryReadByKcat(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is not on PATH (%v): this test needs the independent librdkafka consumer; install it with `apt-get install kcat`", err)
	}
	b := setup(t)
	const topic = "sql.ordered"
	br := startBroker(t, kfakebroker.Options{Topics: []string{topic}})
	for range 3 {
		b.startRelay(newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()}), orderedConfig(8))
	}

	// Writer w owns the keys k with k % writers == w and writes them in
	// groups of keysPerTx keys: each transaction writes perTx events of
	// every key of its group, round by round, so that one key's events are
	// interleaved with the others'. Even rounds are single-row INSERTs,
	// odd rounds one multi-row INSERT for the whole group (with a header).
	const (
		writers   = 4
		keys      = 48
		keysPerTx = 4
		perTx     = 5
		txPerKey  = 3
		perKey    = perTx * txPerKey
	)
	ins := b.sql(`INSERT INTO {{table}} (topic, key, payload) VALUES ($1, convert_to($2, 'UTF8'), convert_to($3, 'UTF8'))`)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var mine []string
			for k := w; k < keys; k += writers {
				mine = append(mine, fmt.Sprintf("key-%02d", k))
			}
			for g := 0; g < len(mine); g += keysPerTx {
				group := mine[g:min(g+keysPerTx, len(mine))]
				for n := range txPerKey {
					if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
						for round := range perTx {
							seq := n*perTx + round
							if round%2 == 0 {
								for _, key := range group {
									if _, err := tx.Exec(b.ctx, ins, topic, key, fmt.Sprintf("%s:%d", key, seq)); err != nil {
										return err
									}
								}
								continue
							}
							var values []string
							args := []any{topic}
							for _, key := range group {
								values = append(values, fmt.Sprintf("($1, convert_to($%d, 'UTF8'), convert_to($%d, 'UTF8'), '{\"writer\": \"psql\"}')", len(args)+1, len(args)+2))
								args = append(args, key, fmt.Sprintf("%s:%d", key, seq))
							}
							if _, err := tx.Exec(b.ctx, b.sql(`INSERT INTO {{table}} (topic, key, payload, headers) VALUES `+strings.Join(values, ", ")), args...); err != nil {
								return err
							}
						}
						return nil
					}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("write with plain SQL: %v", err)
	}
	testdb.AwaitSent(t, b.pool, b.table, keys*perKey, 60*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", br.Addrs()[0], "-C", "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", "%p\t%o\t%k\t%s\t%h\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v; stderr: %s", err, stderr.String())
	}
	var recs []kafkatest.Record
	ids := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("unexpected kcat line %q", line)
		}
		p, err1 := strconv.Atoi(f[0])
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("unexpected kcat line %q", line)
		}
		recs = append(recs, kafkatest.Record{Partition: p, Offset: o, Key: []byte(f[2]), Value: []byte(f[3])})
		seq, _ := strconv.Atoi(f[3][strings.IndexByte(f[3], ':')+1:])
		var id string
		for h := range strings.SplitSeq(f[4], ",") {
			if v, ok := strings.CutPrefix(h, outbox.HeaderEventID+"="); ok {
				id = v
			}
		}
		ids[id] = true
		if odd := seq%perTx%2 == 1; odd != strings.Contains(f[4], "writer=psql") {
			t.Errorf("record %q: headers %q; want writer=psql exactly on the events of multi-row INSERTs", f[3], f[4])
		}
	}
	// kcat interleaves partitions; each partition is in offset order.
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	if dups := kafkatest.CheckKeyOrder(t, recs, keys, perKey); dups != 0 {
		t.Errorf("%d duplicates in a fault-free run", dups)
	}
	if got := b.count("id = ANY($1::uuid[])", slices.Collect(maps.Keys(ids))); got != keys*perKey || len(ids) != keys*perKey {
		t.Errorf("kcat saw %d distinct event ids, %d of them rows of the table; want %d", len(ids), got, keys*perKey)
	}
}

// fileNodes lists the relation files of a table's leaves: the table
// itself, or the partitions of a partitioned one. A rewrite changes them.
// (pg_partition_tree lists nothing for an unpartitioned table.)
const fileNodes = `SELECT coalesce(
    (SELECT string_agg(pg_relation_filenode(relid)::text, ',' ORDER BY relid)
     FROM pg_partition_tree($1::regclass) WHERE isleaf),
    pg_relation_filenode($1::regclass)::text)`

// MySQL migration 004 on MariaDB, on a table qualified with its database:
// rows written in plain SQL without an id, between two batches of the Go
// writer, get UUIDv7 ids that sort between the batches' by time and in
// insertion order among themselves; two relays publish every row once,
// the plain-SQL rows with their keys and payloads.
func TestSQLWriterIDDefaultMariaDB(t *testing.T) {
	t.Parallel()
	m := newMariaDBBackend(t, "events")
	ctx := context.Background()
	dbMillis := func() int64 {
		var ms int64
		if err := m.db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000").Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	// byID reads the table's ids and payloads in id order.
	byID := func() ([]uuid.UUID, []string) {
		rows, err := m.db.Query("SELECT id, payload FROM " + m.ident + " ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []uuid.UUID
		var payloads []string
		for rows.Next() {
			var raw []byte
			var payload string
			if err := rows.Scan(&raw, &payload); err != nil {
				t.Fatal(err)
			}
			id, err := uuid.FromBytes(raw)
			if err != nil || id.Version() != 7 || id.Variant() != uuid.RFC4122 {
				t.Fatalf("id %x of %s: %v; want a UUIDv7", raw, payload, err)
			}
			ids, payloads = append(ids, id), append(payloads, payload)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return ids, payloads
	}

	// The clocks pass each batch's last millisecond before the next
	// batch: ids of one millisecond from two sources have no order.
	first := m.write(t, storeMessages(3, "orders", "go1")...)
	await(t, 10*time.Second, func() bool { return dbMillis() > idTime(first[2].ID).UnixMilli() }, "the database clock stays in the Go writer's millisecond")
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	for _, stmt := range []string{
		"INSERT INTO " + m.ident + " (topic, `key`, payload) VALUES ('orders', 'k1', 'sql-0')",
		"INSERT INTO " + m.ident + " (topic, `key`, payload) VALUES ('orders', 'k2', 'sql-1'), ('orders', 'k1', 'sql-2')",
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ids, _ := byID()
	plain := ids[3:] // after go1's three
	await(t, 10*time.Second, func() bool { return time.Now().UnixMilli() > idTime(plain[2]).UnixMilli() }, "the Go clock stays in the database's millisecond")
	m.write(t, storeMessages(3, "orders", "go2")...)
	want := []string{"go1-0", "go1-1", "go1-2", "sql-0", "sql-1", "sql-2", "go2-0", "go2-1", "go2-2"}
	if _, got := byID(); !slices.Equal(got, want) {
		t.Fatalf("payloads in id order: %v, want %v", got, want)
	}

	sk := &sink{}
	for i := range 2 {
		startStoreRelay(t, m, sk, relay.Config{ID: fmt.Sprintf("relay-%d", i)})
	}
	await(t, 60*time.Second, func() bool { return countStatus(t, m, "sent") == len(want) }, "not every row sent: %v", m.statuses(t))
	acked := sk.ackedByID()
	if len(acked) != len(want) {
		t.Errorf("%d distinct events published, want %d", len(acked), len(want))
	}
	for id, n := range acked {
		if n != 1 {
			t.Errorf("event %s published %d times, want once", id, n)
		}
	}
	published := map[uuid.UUID]string{}
	for _, msg := range sk.ackedMessages() {
		published[msg.ID] = string(msg.Key) + "/" + string(msg.Payload)
	}
	for i, want := range []string{"k1/sql-0", "k2/sql-1", "k1/sql-2"} {
		if got := published[plain[i]]; got != want {
			t.Errorf("plain-SQL row %s published as %q, want %q", plain[i], got, want)
		}
	}
}
