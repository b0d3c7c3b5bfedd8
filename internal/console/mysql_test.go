package console_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/internal/console"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// setupMySQL serves the console on a migrated MariaDB table with alice
// (write) and bob (read).
func setupMySQL(t *testing.T) (*sql.DB, *bundle) {
	t.Helper()
	ctx := context.Background()
	db, _ := mariadbtest.DB(t)
	table := outbox.Table{Name: "outbox"}
	if _, err := migrations.UpMySQL(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	adm, err := admin.NewMySQL(db, admin.Config{Table: table, Actor: "console"})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := console.ParseTokens("alice:write:" + writeSecret + " bob:read:" + readSecret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(console.Handler(adm, tokens))
	t.Cleanup(srv.Close)
	return db, &bundle{ctx: ctx, url: srv.URL}
}

// The console serves an Admin on MySQL/MariaDB as on PostgreSQL: a group
// retried within its confirmed count, audited as the token's name.
func TestMySQLGroupRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, b := setupMySQL(t)

	put := func(lastError string) string {
		id := uuid.Must(uuid.NewV7())
		_, err := db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload, status, attempt, next_retry_at, last_error, created_at, failed_at) "+
			"VALUES (?, 'orders', 'p', 'failed', 5, UTC_TIMESTAMP(6), ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))", id[:], lastError)
		if err != nil {
			t.Fatal(err)
		}
		return id.String()
	}
	status := func(id string) string {
		u := uuid.MustParse(id)
		var s string
		err := db.QueryRowContext(ctx, "SELECT status FROM outbox WHERE id = ?", u[:]).Scan(&s)
		if errors.Is(err, sql.ErrNoRows) {
			return "gone"
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	group := []string{put("timed out after 5s"), put("timed out after 7s")}
	other := put("permanent: no route")
	fp := admin.Fingerprint("orders", "timed out after 5s")

	var groups struct{ Groups []admin.FailureGroup }
	b.get(t, "/api/groups", writeSecret, &groups)
	if len(groups.Groups) != 2 || groups.Groups[0].Fingerprint != fp || groups.Groups[0].Count != 2 {
		t.Fatalf("groups %+v", groups.Groups)
	}
	if code, body := b.do(t, "POST", "/api/groups/"+fp+"/retry", writeSecret, "application/json", `{"confirm": 3}`); code != 409 || status(group[0]) != "failed" {
		t.Errorf("wrong count: %d %s", code, body)
	}
	code, body := b.do(t, "POST", "/api/groups/"+fp+"/retry", writeSecret, "application/json", `{"confirm": 2}`)
	if code != 200 || status(group[0]) != "pending" || status(group[1]) != "pending" || status(other) != "failed" {
		t.Errorf("retry: %d %s; rows %s %s %s", code, body, status(group[0]), status(group[1]), status(other))
	}
	var actors []string
	rows, err := db.QueryContext(ctx, "SELECT CONCAT(actor, ' ', action, ' ', row_count) FROM outbox_audit ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		actors = append(actors, s)
	}
	if !slices.Equal(actors, []string{"console:alice failed.retry 2"}) {
		t.Errorf("audit %q", actors)
	}
}

// Replay and the audit trail on MySQL/MariaDB: sent rows replayed within
// the confirmed count, and the entry read back as the token's name.
func TestMySQLReplayAndAudit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, b := setupMySQL(t)
	var ids []string
	for range 2 {
		id := uuid.Must(uuid.NewV7())
		_, err := db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload, status, attempt, next_retry_at, created_at, sent_at) "+
			"VALUES (?, 'orders', 'p', 'sent', 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))", id[:])
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.String())
	}
	status := func(id string) string {
		u := uuid.MustParse(id)
		var s string
		if err := db.QueryRowContext(ctx, "SELECT status FROM outbox WHERE id = ?", u[:]).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var page auditAnswer
	b.get(t, "/api/audit", readSecret, &page)
	if len(page.Entries) != 0 || page.Next != 0 {
		t.Errorf("an empty trail: %+v", page)
	}
	body := `{"ids": ["` + ids[0] + `", "` + ids[1] + `"], "confirm": %d}`
	if code, resp := b.do(t, "POST", "/api/replay", writeSecret, "application/json", fmt.Sprintf(body, 3)); code != 409 || status(ids[0]) != "sent" {
		t.Errorf("wrong count: %d %s", code, resp)
	}
	code, resp := b.do(t, "POST", "/api/replay", writeSecret, "application/json", fmt.Sprintf(body, 2))
	if code != 200 || status(ids[0]) != "pending" || status(ids[1]) != "pending" {
		t.Errorf("replay: %d %s; rows %s %s", code, resp, status(ids[0]), status(ids[1]))
	}
	b.get(t, "/api/audit", readSecret, &page)
	if got := entries(page.Entries); !slices.Equal(got, []string{"console:alice replay 2"}) || page.Next != 0 {
		t.Errorf("audit %q, next %d", got, page.Next)
	}
}
