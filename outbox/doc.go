// Package outbox is the application side of the transactional outbox: the
// message model, the Writer that inserts messages into the outbox table inside
// the caller's own transaction, and the typed errors it returns.
//
// A message written with Write exists exactly when the caller's transaction
// commits; a rolled-back transaction leaves nothing behind, so nothing is ever
// published for it. The relay (package relay) later claims committed rows and
// publishes them.
//
// The outbox table lives in PostgreSQL (pgx, or database/sql through
// FromSQL) or in MySQL 8 / MariaDB 10.6+ (database/sql with
// go-sql-driver/mysql, through FromMySQL); Write and WriteBatch behave the
// same on both (docs/mysql.md).
//
// The package is a leaf: it imports no other package of this module, so the
// relay and every sink can share its types without import cycles.
package outbox
