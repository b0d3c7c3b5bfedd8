// Package mysqlstore is the relay's store for MySQL 8.0.13+ and MariaDB
// 10.6+: the lease path and the retention janitor (store.Store), and
// ordered delivery (store.Shards, ordered.go: per-key numbers a trigger
// gives in commit order, docs/ordering.md#mysql-and-mariadb), with the
// PostgreSQL store's semantics, over database/sql (go-sql-driver/mysql).
// Each statement is a file in sql/; {{table}}, {{jobs}} and {{shards}}
// name the outbox table, its jobs table and its shard table
// (migrations.MySQLIdent). As on PostgreSQL, durations travel as
// milliseconds and every time is computed by the database, here with
// UTC_TIMESTAMP(6) (DATETIME columns have no zone; NOW() would follow the
// session's time_zone), and every write-back is fenced by the claim token
// in locked_by.
//
// MySQL has no UPDATE ... RETURNING and cannot UPDATE a table it selects
// from in a subquery, so a claim is a short READ COMMITTED transaction:
// SELECT the rows FOR UPDATE SKIP LOCKED (their data too, so no third
// statement reads them back), UPDATE them by id with the lease, commit.
// READ COMMITTED, because under REPEATABLE READ a locking range read also
// locks the gaps of due_idx it walked, and the writers' inserts of new due
// rows would wait for the claim to commit.
//
// Parameters are "?" placeholders, where PostgreSQL's statements name
// theirs (pgx.NamedArgs): go-sql-driver/mysql does not support named
// parameters (it returns an error for sql.Named).
//
// Lists of rows travel as IN lists: {{ids}} in a file becomes one
// placeholder per row, and {{cases}} one "WHEN ? THEN ?" per row for the
// per-row values of retries and failures (PostgreSQL passes arrays and
// unnests them). The parameter list therefore grows with the batch. A
// join with JSON_TABLE would keep it fixed, but MariaDB runs a
// multi-table UPDATE through a temporary table, on disk when a text column
// is set: slower, and under parallel tests one failed with "Error on
// delete of /tmp/#sql-update-....MAI (Errcode: 2)". FORCE
// INDEX (PRIMARY) makes every id one primary-key look-up whatever the
// statistics say: a scan, which the planner picks for a small table,
// would lock, and wait on, rows other claims hold. The claims' scans name
// their index too (due_idx, lapsed_idx, sent_idx: the names MySQL
// migration 001 gives them).
//
// Row counts are the server's "changed" rows (go-sql-driver's default);
// every fenced write-back changes a column of each row it matches
// (status, or the lease end of extend), so changed and matched agree,
// and a DSN with clientFoundRows=true counts the same.
//
// Left out, next to store.Store:
//   - ordering (store.Shards) and lock claims (store.LockClaims): the
//     claims take every row, keyed or not. Ordered delivery needs a design
//     of its own on MySQL (docs/ordering.md#mysql-and-mariadb).
//   - store.Listener: MySQL has no LISTEN/NOTIFY; the relay polls.
//   - store.Vacuumer and store.Partitions: InnoDB purges on its own, and
//     MySQL outbox tables are never partitioned.
package mysqlstore
