package migrations

import (
	"context"
	"database/sql"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// DefaultInboxTable names the inbox table (package inbox) when a Table
// given to the Inbox functions leaves its Name empty.
const DefaultInboxTable = "inbox"

// The inbox table's migrations are a set of their own, numbered from 001
// in inbox/ and mysql_inbox/ and recorded in the inbox table's own
// versions table (inbox_migrations), so that a consumer's database needs
// no outbox table and the two tables migrate apart.

func inboxTable(t outbox.Table) outbox.Table {
	if t.Name == "" {
		t.Name = DefaultInboxTable
	}
	return t
}

// UpInbox applies every pending inbox migration to table ("public"."inbox"
// when Name and Schema are empty), as Up does for the outbox table.
func UpInbox(ctx context.Context, db DB, table outbox.Table) ([]Migration, error) {
	return up(ctx, db, pgInbox, inboxTable(table), Options{})
}

// DownInbox reverts the most recently applied inbox migration of table.
func DownInbox(ctx context.Context, db DB, table outbox.Table) (Migration, bool, error) {
	return down(ctx, db, pgInbox, inboxTable(table))
}

// StatusInbox lists every inbox migration with its applied time.
func StatusInbox(ctx context.Context, q Querier, table outbox.Table) ([]State, error) {
	return status(ctx, q, pgInbox, inboxTable(table))
}

// CheckInbox verifies, without changing anything, that the inbox table
// exists and carries exactly the inbox migrations this binary knows.
func CheckInbox(ctx context.Context, q Querier, table outbox.Table) error {
	return check(ctx, q, pgInbox, inboxTable(table))
}

// UpMySQLInbox applies every pending MySQL/MariaDB inbox migration to
// table (`inbox` in the connection's database when Name and Schema are
// empty), as UpMySQL does for the outbox table.
func UpMySQLInbox(ctx context.Context, db *sql.DB, table outbox.Table) ([]Migration, error) {
	return upMySQL(ctx, db, mysqlInbox, inboxTable(table))
}

// DownMySQLInbox reverts the most recently applied MySQL/MariaDB inbox
// migration of table.
func DownMySQLInbox(ctx context.Context, db *sql.DB, table outbox.Table) (Migration, bool, error) {
	return downMySQL(ctx, db, mysqlInbox, inboxTable(table))
}

// StatusMySQLInbox lists every MySQL/MariaDB inbox migration with its
// applied time.
func StatusMySQLInbox(ctx context.Context, q MySQLQuerier, table outbox.Table) ([]State, error) {
	return statusMySQL(ctx, q, mysqlInbox, inboxTable(table))
}

// CheckMySQLInbox verifies, without changing anything, that the server is
// supported and the inbox table carries exactly the MySQL/MariaDB inbox
// migrations this binary knows.
func CheckMySQLInbox(ctx context.Context, q MySQLQuerier, table outbox.Table) error {
	return checkMySQL(ctx, q, mysqlInbox, inboxTable(table))
}
