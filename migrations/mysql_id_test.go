package migrations

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Migration 004 on MariaDB: a plain-SQL INSERT without id gets a UUIDv7
// made by the database, holding the database's time of the statement; in
// each of two transactions whose statements interleave, the ids strictly
// increase in insertion order across single-row INSERTs, a multi-row
// VALUES and an INSERT ... SELECT ... ORDER BY; a given id is kept; down
// removes the default and up puts it back.
func TestMySQLIDDefault(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	if _, err := UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}

	// Each transaction's statements, in order; a payload names its
	// transaction and its place there.
	statements := []string{
		"INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', 'k', '?0')",
		"INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', 'k', '?1')",
		"INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', 'k', '?2'), ('orders', 'k', '?3'), ('orders', 'k', '?4')",
		"INSERT INTO outbox (topic, payload) SELECT 'orders', CONCAT('?', n) FROM (SELECT 6 AS n UNION ALL SELECT 5) AS s ORDER BY n",
		"INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', 'k', '?7')",
	}
	before := dbNow(t, db).Truncate(time.Millisecond)
	var txs []*sql.Tx
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // committed below
		txs = append(txs, tx)
	}
	for _, stmt := range statements {
		for i, tx := range txs {
			if _, err := tx.ExecContext(ctx, strings.ReplaceAll(stmt, "?", "ab"[i:i+1])); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
	}
	for _, tx := range txs {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	after := dbNow(t, db)

	byTx := map[byte][]string{}
	for _, r := range idRows(t, db) {
		id := r.id
		if v, variant := id[6]>>4, id[8]>>6; v != 7 || variant != 2 {
			t.Errorf("%s (%s): version %d, variant %b; want 7, 10", id, r.payload, v, variant)
		}
		if at := idTime(id); at.Before(before) || at.After(after) {
			t.Errorf("%s (%s) holds %v, want between %v and %v", id, r.payload, at, before, after)
		}
		byTx[r.payload[0]] = append(byTx[r.payload[0]], r.payload)
	}
	for _, name := range []byte("ab") {
		want := []string{}
		for i := range 8 {
			want = append(want, string([]byte{name, '0' + byte(i)}))
		}
		if got := byTx[name]; !slices.Equal(got, want) {
			t.Errorf("transaction %c's rows in id order: %v, want insertion order %v", name, got, want)
		}
	}

	// A given id is kept.
	given := uuid.Must(uuid.NewV7())
	if _, err := db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload) VALUES (?, 'orders', 'given')", given[:]); err != nil {
		t.Fatal(err)
	}
	var payload string
	if err := db.QueryRowContext(ctx, "SELECT payload FROM outbox WHERE id = ?", given[:]).Scan(&payload); err != nil || payload != "given" {
		t.Fatalf("row of the given id: %q, %v", payload, err)
	}

	// Down to 003: every writer must give an id again; up: the default is
	// back.
	for _, want := range []int{5, 4} {
		if m, ok, err := DownMySQL(ctx, db, outbox.Table{}); err != nil || !ok || m.Version != want {
			t.Fatalf("DownMySQL = %03d, %v, %v; want %03d", m.Version, ok, err, want)
		}
	}
	var me *mysql.MySQLError
	if _, err := db.ExecContext(ctx, "INSERT INTO outbox (topic, payload) VALUES ('orders', 'down')"); !errors.As(err, &me) || me.Number != 1364 {
		t.Fatalf("INSERT without id after down: %v, want error 1364 (no default)", err)
	}
	if _, err := UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO outbox (topic, payload) VALUES ('orders', 'up again')"); err != nil {
		t.Fatalf("INSERT without id after up again: %v", err)
	}
	if n := len(idRows(t, db)); n != 2*8+2 {
		t.Fatalf("%d rows, want %d", n, 2*8+2)
	}
}

type idRow struct {
	id      uuid.UUID
	payload string
}

// idRows reads the outbox's ids and payloads in id order.
func idRows(t *testing.T, db *sql.DB) []idRow {
	t.Helper()
	rows, err := db.Query("SELECT id, payload FROM outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []idRow
	for rows.Next() {
		var raw []byte
		var r idRow
		if err := rows.Scan(&raw, &r.payload); err != nil {
			t.Fatal(err)
		}
		if r.id, err = uuid.FromBytes(raw); err != nil {
			t.Fatalf("id %x: %v", raw, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// idTime is the unix time in milliseconds in the first 48 bits of a
// UUIDv7.
func idTime(id uuid.UUID) time.Time {
	var b [8]byte
	copy(b[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:]))).UTC()
}

// dbNow reads the database's clock.
func dbNow(t *testing.T, db *sql.DB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.QueryRow("SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}
