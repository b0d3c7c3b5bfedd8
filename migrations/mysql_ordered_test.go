package migrations

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The ordered trigger numbers a key's events in commit order: a second
// writer of the key waits for the first's transaction, a rolled-back
// write takes its number back, and keyless rows get none.
func TestPrepareOrderedMySQL(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	table := outbox.Table{}
	if _, err := PrepareOrderedMySQL(ctx, db, table); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("prepare before up: %v, want ErrNotMigrated", err)
	}
	if _, err := UpMySQL(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	if ok, err := OrderedPreparedMySQL(ctx, db, table); ok || err != nil {
		t.Fatalf("prepared before prepare: %v, %v", ok, err)
	}
	for _, want := range []bool{true, false} {
		if created, err := PrepareOrderedMySQL(ctx, db, table); created != want || err != nil {
			t.Fatalf("prepare: created %v, %v; want %v", created, err, want)
		}
	}
	insert := func(tx *sql.Tx, id byte, key []byte) {
		t.Helper()
		_, err := tx.ExecContext(ctx, "INSERT INTO outbox (id, topic, `key`, payload) VALUES (?, 't', ?, 'p')", []byte{15: id}, key)
		if err != nil {
			t.Fatal(err)
		}
	}
	begin := func() *sql.Tx {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// An earlier write commits after a later one began: the later waits.
	t1 := begin()
	t.Cleanup(func() { t1.Rollback() }) //nolint:errcheck // a no-op after Commit
	insert(t1, 1, []byte("k"))
	done := make(chan error, 1)
	go func() {
		t2, err := db.BeginTx(ctx, nil)
		if err == nil {
			_, err = t2.ExecContext(ctx, "INSERT INTO outbox (id, topic, `key`, payload) VALUES (?, 't', 'k', 'p')", []byte{15: 2})
		}
		if err == nil {
			err = t2.Commit()
		}
		done <- err
	}()
	waitLockWait(t, db)
	select {
	case err := <-done:
		t.Fatalf("the second writer of the key did not wait for the first: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t3 := begin()
	insert(t3, 3, []byte("k"))
	if err := t3.Rollback(); err != nil {
		t.Fatal(err)
	}
	t4 := begin()
	insert(t4, 4, []byte("k"))
	insert(t4, 5, nil)
	if err := t4.Commit(); err != nil {
		t.Fatal(err)
	}
	want := map[byte]sql.NullInt64{1: {Int64: 1, Valid: true}, 2: {Int64: 2, Valid: true}, 4: {Int64: 3, Valid: true}, 5: {}}
	rows, err := db.QueryContext(ctx, "SELECT id, seq, bucket IS NULL, khash IS NULL FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id []byte
		var seq sql.NullInt64
		var noBucket, noHash bool
		if err := rows.Scan(&id, &seq, &noBucket, &noHash); err != nil {
			t.Fatal(err)
		}
		n++
		if w := want[id[15]]; seq != w || noBucket != !w.Valid || noHash != !w.Valid {
			t.Errorf("row %d: seq %v, bucket NULL %v, khash NULL %v; want seq %v", id[15], seq, noBucket, noHash, w)
		}
	}
	if err := rows.Err(); err != nil || n != len(want) {
		t.Fatalf("%d rows, %v; want %d", n, err, len(want))
	}
	// Down drops the trigger with the rest.
	if _, _, err := DownMySQL(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	if ok, err := OrderedPreparedMySQL(ctx, db, table); ok || err != nil {
		t.Fatalf("prepared after down: %v, %v", ok, err)
	}
}

// waitLockWait waits until a session of db's database runs a statement
// on the counter table (the second writer's trigger, waiting for the
// counter row's lock).
func waitLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE '%outbox_keys%'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the second writer never ran its INSERT")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
