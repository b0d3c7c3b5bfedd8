// Package pgstore is the relay's store for PostgreSQL: every statement the
// relay runs against PostgreSQL, and the only part of the relay that knows
// it talks to PostgreSQL. It implements store.Store and what only
// PostgreSQL offers: store.Shards (ordered delivery), store.LockClaims,
// store.Listener, store.Vacuumer and store.Partitions. Each statement is a
// file in sql/, with one fixed parameter list whatever the configuration;
// {{table}}, {{shards}} and {{jobs}} name the outbox table and its related
// tables. Durations are milliseconds, so that the database
// clock does all time arithmetic. Every write-back is fenced by the token
// of the claim that took the rows: it is written to locked_by by the claim,
// and a write-back touches only rows whose locked_by is still its own.
package pgstore
