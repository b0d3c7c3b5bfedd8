package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Partitioned tables (docs/architecture.md#partitioned-tables). The rest
// of this package runs against them too when OUTBOX_TEST_PARTITION_INTERVAL
// is set (make test does both); these tests are about what only a
// partitioned table does, and make their own.

// setupPartitioned is setup with a table partitioned by interval.
func setupPartitioned(t *testing.T, interval time.Duration) *bundle {
	t.Helper()
	pool, table := testdb.NewEmpty(t)
	if _, err := migrations.UpWith(context.Background(), pool, table, migrations.Options{PartitionInterval: interval}); err != nil {
		t.Fatalf("migrate partitioned: %v", err)
	}
	return bundleFor(t, pool, table)
}

// idAt is a UUIDv7-shaped id made at t, with random low bits.
func idAt(t time.Time) uuid.UUID {
	id := migrations.BoundID(t)
	_, _ = rand.Read(id[6:])
	id[6] = 0x70 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return id
}

// partitions lists the table's range partitions.
func (b *bundle) partitions() []migrations.Partition {
	b.t.Helper()
	parts, err := migrations.Partitions(b.ctx, b.pool, b.table)
	if err != nil {
		b.t.Fatal(err)
	}
	return parts
}

// addPartition attaches a partition for [from, to) by hand, as if the
// table had existed then.
func (b *bundle) addPartition(from, to time.Time) migrations.Partition {
	b.t.Helper()
	p := migrations.Partition{Name: "outbox_p" + from.UTC().Format("20060102t150405"), From: from, To: to}
	b.exec("CREATE TABLE " + pgx.Identifier{b.table.Schema, p.Name}.Sanitize() + " PARTITION OF {{table}} FOR VALUES FROM ('" +
		p.Lower().String() + "') TO ('" + p.Upper().String() + "')")
	return p
}

// exists reports whether the partition's table exists.
func (b *bundle) exists(p migrations.Partition) bool {
	b.t.Helper()
	var ok bool
	if err := b.pool.QueryRow(b.ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{b.table.Schema, p.Name}.Sanitize()).Scan(&ok); err != nil {
		b.t.Fatal(err)
	}
	return ok
}

// writeAt writes n events with ids made at t (and dedup keys when given),
// aged as age does.
func (b *bundle) writeAt(at time.Time, n int, status, ago string, dedup ...string) []uuid.UUID {
	b.t.Helper()
	msgs := make([]outbox.Message, n)
	ids := make([]uuid.UUID, n)
	for i := range msgs {
		ids[i] = idAt(at)
		msgs[i] = outbox.Message{ID: ids[i], Topic: "orders", Payload: []byte("x")}
		if i < len(dedup) {
			msgs[i].DedupKey = dedup[i]
		}
	}
	if _, err := b.writer.WriteBatch(b.ctx, b.pool, msgs); err != nil {
		b.t.Fatalf("write at %v: %v", at, err)
	}
	b.age(ids, status, ago)
	return ids
}

// The migration creates a table partitioned by id with a DEFAULT
// partition and the partitions from the current interval to
// PartitionsAhead ahead, aligned to the interval; a second Up changes
// nothing, an interval on an unpartitioned table is refused, and Down
// removes every object the partitioned shape added.
func TestPartitionedMigration(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, time.Hour)
	now := b.dbNow()
	parts := b.partitions()
	if len(parts) < migrations.PartitionsAhead+1 {
		t.Fatalf("%d partitions, want at least %d: %+v", len(parts), migrations.PartitionsAhead+1, parts)
	}
	if first := parts[0]; first.From.After(now) || !first.To.After(now) || !first.From.Equal(first.From.Truncate(time.Hour)) {
		t.Errorf("first partition %v-%v does not hold now (%v) aligned to the hour", first.From, first.To, now)
	}
	for i := 1; i < len(parts); i++ {
		if !parts[i].From.Equal(parts[i-1].To) || parts[i].To.Sub(parts[i].From) != time.Hour {
			t.Errorf("partition %d is %v-%v after %v: not contiguous hours", i, parts[i].From, parts[i].To, parts[i-1].To)
		}
	}
	if last := parts[len(parts)-1]; last.To.Before(now.Add(migrations.PartitionsAhead * time.Hour)) {
		t.Errorf("partitions end at %v, want at least %d hours past %v", last.To, migrations.PartitionsAhead, now)
	}
	if name, ok, err := migrations.DefaultPartition(b.ctx, b.pool, b.table); err != nil || !ok {
		t.Errorf("DefaultPartition = %q, %v, %v; want one", name, ok, err)
	}
	if applied, err := migrations.UpWith(b.ctx, b.pool, b.table, migrations.Options{PartitionInterval: time.Hour}); err != nil || len(applied) != 0 {
		t.Errorf("second UpWith = %v, %v; want nothing applied", applied, err)
	}
	if got := b.partitions(); len(got) != len(parts) {
		t.Errorf("second UpWith changed the partitions: %d, then %d", len(parts), len(got))
	}

	plain := setupUnpartitioned(t)
	if _, err := migrations.UpWith(b.ctx, plain.pool, plain.table, migrations.Options{PartitionInterval: time.Hour}); !errors.Is(err, migrations.ErrNotPartitioned) {
		t.Errorf("UpWith with an interval on an unpartitioned table = %v, want ErrNotPartitioned", err)
	}
	if _, err := migrations.UpWith(b.ctx, plain.pool, outbox.Table{Schema: plain.table.Schema, Name: "other"}, migrations.Options{PartitionInterval: 1500 * time.Millisecond}); err == nil {
		t.Error("UpWith accepted an interval of 1.5 s, want whole seconds")
	}

	for {
		_, ok, err := migrations.Down(b.ctx, b.pool, b.table)
		if err != nil {
			t.Fatalf("Down: %v", err)
		}
		if !ok {
			break
		}
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname NOT LIKE 'outbox\_migrations%')
    + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)`, b.table.Schema).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d relations or functions left in the schema after every Down", left)
	}
}

// A dedup key is unique across partitions: a second write with the key,
// whose id falls in another partition (or the DEFAULT one), is a
// duplicate that names the first row's id, and nothing is written. Once
// the first row is deleted the key is free again.
func TestPartitionedDedupKeyAcrossPartitions(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, time.Hour)
	now := b.dbNow()
	first := idAt(now)
	res, err := b.writer.Write(b.ctx, b.pool, outbox.Message{ID: first, Topic: "orders", Payload: []byte("a"), DedupKey: "order-1"})
	if err != nil || res.Duplicate {
		t.Fatalf("first write = %+v, %v", res, err)
	}
	for _, at := range []time.Time{now.Add(2 * time.Hour), now.Add(-48 * time.Hour)} { // the next-but-one partition; DEFAULT
		res, err := b.writer.Write(b.ctx, b.pool, outbox.Message{ID: idAt(at), Topic: "orders", Payload: []byte("b"), DedupKey: "order-1"})
		if err != nil || !res.Duplicate || res.ID != first {
			t.Errorf("write at %v with the same key = %+v, %v; want a duplicate of %s", at, res, err, first)
		}
	}
	if n := b.count("dedup_key = 'order-1'"); n != 1 {
		t.Fatalf("%d rows hold the key, want 1", n)
	}
	b.exec("DELETE FROM {{table}} WHERE id = $1", first)
	res, err = b.writer.Write(b.ctx, b.pool, outbox.Message{ID: idAt(now.Add(time.Hour)), Topic: "orders", Payload: []byte("c"), DedupKey: "order-1"})
	if err != nil || res.Duplicate {
		t.Errorf("write after the first row was deleted = %+v, %v; want a new row", res, err)
	}
}

// Retention on a partitioned table: a partition whose events all expired
// and were all sent before the cut-off is dropped with its dedup keys; an
// expired partition holding a failed row is kept, and only its expired
// sent rows are deleted; an expired partition with rows sent within the
// retention is kept whole; the DEFAULT partition's expired sent rows are
// deleted; a partition that is not expired keeps even sent rows older
// than the retention (it is dropped whole later).
func TestPartitionedRetentionDropsExpiredPartitions(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, time.Hour)
	now := b.dbNow().Truncate(time.Hour)
	dropped := b.addPartition(now.Add(-6*time.Hour), now.Add(-5*time.Hour))
	failed := b.addPartition(now.Add(-5*time.Hour), now.Add(-4*time.Hour))
	recent := b.addPartition(now.Add(-4*time.Hour), now.Add(-3*time.Hour))

	gone := b.writeAt(dropped.From.Add(time.Minute), 20, "sent", "5 hours", "key-a", "key-b")
	failedSent := b.writeAt(failed.From.Add(time.Minute), 10, "sent", "4 hours")
	failedRow := b.writeAt(failed.From.Add(2*time.Minute), 1, "failed", "4 hours")
	recentSent := b.writeAt(recent.From.Add(time.Minute), 10, "sent", "10 minutes")
	defaultSent := b.writeAt(now.Add(-48*time.Hour), 5, "sent", "2 days")
	current := b.writeAt(now, 5, "sent", "2 days") // a current partition, sent_at forced far back

	r := b.newRelay(&sink{}, relay.Config{Retention: time.Hour})
	res := runRetention(t, b.ctx, r)
	if !res.Ran || !res.Complete || res.Dropped != 1 || res.Kept != 2 || res.Deleted != int64(len(failedSent)+len(defaultSent)) || res.LockWaited {
		t.Errorf("RunRetention = %+v; want 1 partition dropped, 2 kept, %d rows deleted", res, len(failedSent)+len(defaultSent))
	}
	if b.exists(dropped) || b.present(gone) != 0 {
		t.Errorf("the expired, all-sent partition is still there (%v) with %d rows", b.exists(dropped), b.present(gone))
	}
	var keys int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+b.table.Related("dedup")+" WHERE dedup_key IN ('key-a', 'key-b')").Scan(&keys); err != nil || keys != 0 {
		t.Errorf("%d dedup keys of the dropped partition left (%v), want 0", keys, err)
	}
	if !b.exists(failed) || b.present(failedRow) != 1 || b.present(failedSent) != 0 {
		t.Errorf("partition with a failed row: exists %v, failed row %d, sent rows %d; want kept, 1, 0",
			b.exists(failed), b.present(failedRow), b.present(failedSent))
	}
	if !b.exists(recent) || b.present(recentSent) != len(recentSent) {
		t.Errorf("partition sent within the retention: exists %v, %d of %d rows", b.exists(recent), b.present(recentSent), len(recentSent))
	}
	if b.present(defaultSent) != 0 {
		t.Errorf("%d expired sent rows left in the DEFAULT partition, want 0", b.present(defaultSent))
	}
	if b.present(current) != len(current) {
		t.Errorf("%d of %d rows of a current partition deleted", len(current)-b.present(current), len(current))
	}
	if j := b.job(); j.TotalDeleted < int64(len(failedSent)+len(defaultSent)) {
		t.Errorf("job row total_deleted %d, want at least the %d rows deleted", j.TotalDeleted, len(failedSent)+len(defaultSent))
	}
}

// While another transaction holds a lock on the table, the drop gives up
// after its lock timeout instead of queueing writers behind it; the run is
// not complete, and the partition is dropped by a later run.
func TestPartitionedRetentionGivesUpOnABusyLock(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, time.Hour)
	now := b.dbNow().Truncate(time.Hour)
	old := b.addPartition(now.Add(-6*time.Hour), now.Add(-5*time.Hour))
	b.writeAt(old.From, 3, "sent", "5 hours")
	r := b.newRelay(&sink{}, relay.Config{Retention: time.Hour})

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, b.sql("SELECT count(*) FROM {{table}}")); err != nil { // ACCESS SHARE until the end
		t.Fatal(err)
	}
	res := runRetention(t, b.ctx, r)
	_ = tx.Rollback(b.ctx)
	if !res.Ran || !res.LockWaited || res.Complete || res.Dropped != 0 || !b.exists(old) {
		t.Fatalf("RunRetention under a held lock = %+v, partition exists %v; want LockWaited, not complete, kept", res, b.exists(old))
	}
	res = runRetention(t, b.ctx, r) // the job is still due: the run was not complete
	if !res.Ran || res.Dropped != 1 || b.exists(old) {
		t.Errorf("RunRetention after the lock was released = %+v, partition exists %v; want it dropped", res, b.exists(old))
	}
}

// The partitions job creates the missing partitions ahead, once per
// JanitorInterval cluster-wide; a period whose events already went to the
// DEFAULT partition is left to it, and the job goes on past it.
func TestPartitionsJobCreatesAhead(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, time.Hour)
	parts := b.partitions()
	// Lose the last two partitions, and write an event into the period of
	// the last one: it lands in the DEFAULT partition.
	for _, p := range parts[len(parts)-2:] {
		b.exec("DROP TABLE " + pgx.Identifier{b.table.Schema, p.Name}.Sanitize())
	}
	blocked := parts[len(parts)-1]
	b.writeAt(blocked.From.Add(time.Minute), 1, "pending", "0")

	r := b.newRelay(&sink{}, relay.Config{JanitorInterval: time.Hour})
	res, err := r.RunPartitions(b.ctx)
	if err != nil || !res.Ran || res.Waited || res.LeaseLost {
		t.Fatalf("RunPartitions = %+v, %v", res, err)
	}
	want := parts[len(parts)-2].Name
	if len(res.Created) != 1 || res.Created[0] != want {
		t.Errorf("created %v, want [%s] (the period with a DEFAULT row left to it)", res.Created, want)
	}
	got := b.partitions()
	if len(got) != len(parts)-1 || b.exists(blocked) {
		t.Errorf("%d partitions after the job (blocked one exists: %v), want %d", len(got), b.exists(blocked), len(parts)-1)
	}
	if again, err := r.RunPartitions(b.ctx); err != nil || again.Ran {
		t.Errorf("second RunPartitions within the interval = %+v, %v; want not run", again, err)
	}

	// An unpartitioned table has no partitions job.
	plain := setupUnpartitioned(t)
	pr := plain.newRelay(&sink{}, relay.Config{})
	if res, err := pr.RunPartitions(plain.ctx); err != nil || res.Ran {
		t.Errorf("RunPartitions on an unpartitioned table = %+v, %v; want not run", res, err)
	}
}
