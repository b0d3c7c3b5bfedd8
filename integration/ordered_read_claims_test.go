package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Tests of ordered claims that read their rows (migration 009): the claim
// writes only its shard's row, the outcome is written under the shard's
// lease, and a claim that ends without an outcome still counts an attempt.

// claimState is what these tests read of a row: status and attempt.
type claimState struct {
	status  string
	attempt int
}

func (b *bundle) claimStates(ids []uuid.UUID) []claimState {
	b.t.Helper()
	var out []claimState
	for _, id := range ids {
		var s claimState
		if err := b.pool.QueryRow(b.ctx, b.sql("SELECT status, attempt FROM {{table}} WHERE id = $1"), id).Scan(&s.status, &s.attempt); err != nil {
			b.t.Fatalf("row %s: %v", id, err)
		}
		out = append(out, s)
	}
	return out
}

// noted returns the ids shard 0's row notes as claimed, sorted.
func (b *bundle) noted() []uuid.UUID {
	b.t.Helper()
	var ids []uuid.UUID
	if err := b.pool.QueryRow(b.ctx, "SELECT coalesce(claimed, '{}') FROM "+b.table.Related("shard_ranges")+" WHERE shard = 0").Scan(&ids); err != nil {
		b.t.Fatalf("claimed of shard 0: %v", err)
	}
	slices.SortFunc(ids, compareUUID)
	return ids
}

// recordSent runs record_ordered.sql for shard 0 as lessee: ids sent,
// unknown left without an outcome. It returns how many rows it wrote.
func (b *bundle) recordSent(lessee string, ids, unknown []uuid.UUID) int {
	b.t.Helper()
	return b.recordSentAt(lessee, ids, nil, unknown)
}

// recordSentAt is recordSent with the tuple ids where the claim read the
// sent rows (nil: by primary key alone).
func (b *bundle) recordSentAt(lessee string, ids []uuid.UUID, tids []pgtype.TID, unknown []uuid.UUID) int {
	b.t.Helper()
	sorted := slices.SortedFunc(slices.Values(ids), compareUUID)
	var sent int
	err := b.pool.QueryRow(b.ctx, b.relaySQL("record_ordered"), pgx.NamedArgs{"shard": 0, "lessee": lessee, "owner": "claim#1",
		"sent": ids, "lo": sorted[0], "hi": sorted[len(sorted)-1], "unknown": unknown, "tids": tids, "raise": nil}).Scan(&sent)
	if err != nil {
		b.t.Fatalf("record: %v", err)
	}
	return sent
}

// The claim leaves its rows pending and untouched, returns the attempt the
// publish is, and notes the rows in the shard's row. A replica that leases
// the shard after its holder died counts that attempt, and the dead
// holder's write-back, should it come back, writes nothing.
func TestOrderedReadClaimAndTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.leaseShardZero()
	keys := b.keysIn(0, 2)
	var msgs []outbox.Message
	for i := range 6 {
		msgs = append(msgs, outbox.Message{Topic: "orders", Key: []byte(keys[i%2]), Payload: fmt.Appendf(nil, "%d", i)})
	}
	ids := b.write(msgs...)
	slices.SortFunc(ids, compareUUID)
	// Rows are ready once every older transaction of the server has ended,
	// and other tests run beside this one.
	await(t, time.Minute, func() bool { return len(b.claimShardZero(true)) == len(ids) }, "the rows never became claimable")

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := b.claimQuery(tx, 10)
	if err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	var claimed []uuid.UUID
	var attempts []int
	for rows.Next() {
		var id uuid.UUID
		var attempt int
		var skip any
		if err := rows.Scan(&id, &skip, &skip, &skip, &skip, &attempt, &skip, &skip, &skip, &skip); err != nil {
			b.fatalIn(tx, "claim: %v", err)
		}
		claimed, attempts = append(claimed, id), append(attempts, attempt)
	}
	if err := rows.Err(); err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(claimed, compareUUID)
	if !slices.Equal(claimed, ids) {
		t.Fatalf("claimed %v, want every row %v", claimed, ids)
	}
	if slices.ContainsFunc(attempts, func(a int) bool { return a != 1 }) {
		t.Errorf("claim returned attempts %v, want 1 for each row", attempts)
	}
	for i, s := range b.claimStates(ids) {
		if s != (claimState{"pending", 0}) {
			t.Errorf("row %s after the claim: %+v, want pending with attempt 0", ids[i], s)
		}
	}
	if got := b.noted(); !slices.Equal(got, ids) {
		t.Errorf("shard row notes %v as claimed, want %v", got, ids)
	}

	// The holder dies: its lease lapses. Another replica leases the shard.
	b.exec("UPDATE " + b.table.Related("shard_ranges") + " SET locked_until = now() - interval '1 second' WHERE shard = 0")
	var shard int
	args := pgx.NamedArgs{"lease_ms": 60000, "lessee": "heir#1", "shards": claimShards, "all_ordered": true, "ordered_topics": nil}
	if err := b.pool.QueryRow(b.ctx, b.relaySQL("lease_shard"), args).Scan(&shard); err != nil || shard != 0 {
		t.Fatalf("lease_shard = %d, %v; want shard 0", shard, err)
	}
	for i, s := range b.claimStates(ids) {
		if s != (claimState{"pending", 1}) {
			t.Errorf("row %s after the takeover: %+v, want pending with attempt 1 (the dead holder's)", ids[i], s)
		}
	}
	if got := b.noted(); len(got) != 0 {
		t.Errorf("shard row still notes %v after the takeover counted them", got)
	}

	// The dead holder comes back and writes its outcome: fenced.
	if n := b.recordSent(claimLessee, ids, nil); n != 0 {
		t.Errorf("the former holder's write-back wrote %d rows, want 0", n)
	}
	// The heir publishes them and writes its outcome, one row left
	// without one (abandoned): it stays noted for the next lease.
	if n := b.recordSent("heir#1", ids[1:], ids[:1]); n != len(ids)-1 {
		t.Errorf("the holder's write-back wrote %d rows, want %d", n, len(ids)-1)
	}
	states := b.claimStates(ids)
	if states[0] != (claimState{"pending", 1}) {
		t.Errorf("abandoned row %s: %+v, want pending with attempt 1", ids[0], states[0])
	}
	for i, s := range states[1:] {
		if s != (claimState{"sent", 2}) {
			t.Errorf("row %s: %+v, want sent with attempt 2", ids[i+1], s)
		}
	}
	if got := b.noted(); !slices.Equal(got, ids[:1]) {
		t.Errorf("shard row notes %v, want the abandoned row %v", got, ids[:1])
	}
}

// A row whose publish never ends (the sink hangs on it) is abandoned every
// time; the shard returns when its lease ends, and each lease after such a
// claim counts the attempt, so the row fails after MaxAttempts instead of
// blocking its key for ever, and the key's next event is published.
func TestOrderedAbandonedPublishesCountTowardsMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The sink never returns from a publish of the poison payload,
	// ignoring its context, until the test ends; everything else it takes.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var tries atomic.Int64
	s := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
		for _, m := range msgs {
			if string(m.Payload) == "poison" {
				tries.Add(1)
				<-release
			}
		}
		return nil
	}}
	delivered := func() []string {
		var got []string
		for _, m := range s.ackedMessages() {
			got = append(got, string(m.Payload))
		}
		return got
	}
	cfg := relay.Config{
		Ordering:       relay.Ordering{Topics: []string{"*"}, Shards: 4},
		MaxAttempts:    2,
		Lease:          time.Second,
		PublishTimeout: 100 * time.Millisecond,
		PollInterval:   20 * time.Millisecond,
		Workers:        1,
	}
	ids := b.write(
		outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("poison")},
		outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("after")},
	)
	b.startRelay(s, cfg)
	// The poison row fails in the batch that publishes the event after it,
	// so the sink sees that event before the outcome is written.
	await(t, 30*time.Second, func() bool {
		return slices.Contains(delivered(), "after") && b.count("id = $1 AND status = 'failed'", ids[0]) == 1
	}, "the poison row did not fail, or the event after it was not published")
	var status, lastError string
	var attempt int
	if err := b.pool.QueryRow(b.ctx, b.sql("SELECT status, attempt, coalesce(last_error, '') FROM {{table}} WHERE id = $1"), ids[0]).Scan(&status, &attempt, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(lastError, "exceeds max attempts") {
		t.Errorf("poison row: %s, %q; want failed for exceeding max attempts", status, lastError)
	}
	if attempt != 3 {
		t.Errorf("poison row attempt %d, want 3 (two abandoned publishes, then the claim that failed it)", attempt)
	}
	if n := tries.Load(); n != 2 {
		t.Errorf("the poison was published %d times, want MaxAttempts = 2", n)
	}
	if got := delivered(); !slices.Equal(got, []string{"after"}) {
		t.Errorf("delivered %v, want [after]", got)
	}
}

// 009 down drops the shard row's claimed column, and with it a 009
// replica's ordered claims, which fail instead of reading rows that 008
// replicas mark processing; 009 up brings them back.
func TestMigration009DownFencesReadClaims(t *testing.T) {
	t.Parallel()
	b := setupUnpartitioned(t)
	for v := migrations.Latest(); v >= 9; v-- { // the later ones first
		if m, ok, err := migrations.Down(b.ctx, b.pool, b.table); err != nil || !ok || m.Version != v {
			t.Fatalf("Down = %v, %v, %v; want %03d reverted", m.Version, ok, err, v)
		}
	}
	b.leaseShardZero()
	b.write(outbox.Message{Topic: "orders", Key: []byte(b.keysIn(0, 1)[0]), Payload: []byte("x")})
	claim := func() error {
		rows, err := b.claimQuery(b.pool, 10)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
	err := claim()
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "42703" {
		t.Errorf("a 009 claim after 009 down: %v, want undefined_column (42703)", err)
	}
	if _, err := migrations.Up(b.ctx, b.pool, b.table); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if err := claim(); err != nil {
		t.Errorf("a 009 claim after 009 up again: %v", err)
	}
}

// claimShardZero runs the ordered claim of shard 0 as its lessee, and
// returns the ids it took; with rollback, in a transaction it rolls back.
func (b *bundle) claimShardZero(rollback bool) []uuid.UUID {
	b.t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	rows, err := b.claimQuery(tx, 10)
	if err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	ids := b.claimedIDs(tx, rows)
	end := tx.Commit
	if rollback {
		end = tx.Rollback
	}
	if err := end(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	return ids
}

// A claim raises its shard's floor past the rows it finished, and later
// claims and leases read from there. A failed row below the floor, made
// pending again by relay failed retry, is claimed, because the retry
// clears the floors; with the floor put back it would not be: the floor
// is what the probes start from. (Rows are ready only once every older
// transaction of the server has ended, and other tests run beside this
// one: the claims are awaited.)
func TestOrderedFloorAndARedriveBelowIt(t *testing.T) {
	t.Parallel()
	b := setupUnpartitioned(t)
	b.leaseShardZero()
	key := []byte(b.keysIn(0, 1)[0])
	var ids []uuid.UUID
	for i := range 3 { // one transaction each: three writing transactions, in order
		ids = append(ids, b.write(outbox.Message{Topic: "orders", Key: key, Payload: fmt.Appendf(nil, "%d", i)})...)
	}
	b.exec("UPDATE {{table}} SET status = 'failed', failed_at = now(), last_error = 'x' WHERE id = $1", ids[0])
	const wait = time.Minute
	// The rows become ready one by one as older transactions end: a claim
	// that is rolled back looks until both are, then one claims them.
	var got []uuid.UUID
	await(t, wait, func() bool { got = b.claimShardZero(true); return slices.Equal(got, ids[1:]) }, "the claim did not take both rows %v", ids[1:])
	got = b.claimShardZero(false)
	if !slices.Equal(got, ids[1:]) {
		t.Fatalf("claimed %v, want %v", got, ids[1:])
	}
	if n := b.recordSent(claimLessee, ids[1:], nil); n != 2 {
		t.Fatalf("recorded %d rows, want 2", n)
	}
	floorAboveAll := func() bool {
		t.Helper()
		var above bool
		err := b.pool.QueryRow(b.ctx, b.sql(`SELECT coalesce(s.floor_tx > (SELECT max(tx) FROM {{table}}), false)
			FROM `+b.table.Related("shard_ranges")+` AS s WHERE s.shard = 0`)).Scan(&above)
		if err != nil {
			t.Fatal(err)
		}
		return above
	}
	await(t, wait, func() bool {
		if got := b.claimShardZero(false); len(got) != 0 {
			t.Fatalf("claimed %v from a drained shard", got)
		}
		return floorAboveAll()
	}, "after drained claims the floor is not above every row written")

	adm, err := admin.New(b.pool, admin.Config{Table: b.table, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := adm.RetryFailed(b.ctx, admin.Filter{IDs: []string{ids[0].String()}}, admin.ActionOptions{}); err != nil || res.Rows != 1 {
		t.Fatalf("RetryFailed = %+v, %v", res, err)
	}
	var floorSet bool
	if err := b.pool.QueryRow(b.ctx, "SELECT floor_tx IS NOT NULL FROM "+b.table.Related("shard_ranges")+" WHERE shard = 0").Scan(&floorSet); err != nil || floorSet {
		t.Fatalf("after relay failed retry the floor is still set (%v, %v)", floorSet, err)
	}
	await(t, wait, func() bool { return slices.Equal(b.claimShardZero(true), ids[:1]) }, "the re-driven row is not claimed")

	// The floor put back above it: the claim does not see the row.
	b.exec("UPDATE " + b.table.Related("shard_ranges") + " SET floor_tx = (SELECT max(tx) FROM {{table}})::text::xid8 WHERE shard = 0")
	if got := b.claimShardZero(true); len(got) != 0 {
		t.Fatalf("with the floor above it the claim took %v, want nothing: the probes do not start at the floor", got)
	}
	b.exec("UPDATE " + b.table.Related("shard_ranges") + " SET floor_tx = NULL WHERE shard = 0")
	if got := b.claimShardZero(false); !slices.Equal(got, ids[:1]) {
		t.Fatalf("claimed %v once the floor was cleared, want the re-driven row %v", got, ids[:1])
	}
}
