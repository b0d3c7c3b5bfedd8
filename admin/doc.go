// Package admin is what an operator does to an outbox table while its
// relays run: look at it (Status), list and re-drive or delete failed rows
// (ListFailed, RetryFailed, PurgeFailed), by failure group too
// (FailureGroups, Filter.Group), and send sent rows again (Replay). The
// relay binary's status, failed and replay commands are thin wrappers
// around it (docs/operations.md#admin-commands).
//
// Every change is safe while relays run: like the relay's own write-backs,
// each statement changes only rows in the state it expects (failed, or
// sent), locked and re-checked in the same statement, so a row a relay
// claimed in the meantime is never touched, and a processing row is never
// changed. Every change is written to the table's audit trail (migration
// 007) in the transaction that makes it, with who asked, when by the
// database clock, what (the action and its filter as JSON) and how many
// rows, and logged; AuditLog reads the trail back, newest first.
//
// Reads are cheap on a large table: they go through the partial indexes
// of the states they read (pending, processing, failed, sent), so their
// cost follows the backlog and the failed rows, not the sent rows that
// make up most of a busy table.
//
// New works on PostgreSQL (pgx); NewMySQL returns the same Admin on a
// MySQL 8.0.13+ or MariaDB 10.6+ database/sql pool, with its statements in
// sql/mysql/ and the differences MySQL imposes listed in mysql.go
// (docs/operations.md#on-mysql-and-mariadb).
package admin
