// Package migrations holds the versioned SQL that creates and evolves the
// outbox table, embedded in the binary, and the runner behind
// `relay migrate up|down|status`.
//
// Files are named NNN_name.up.sql and NNN_name.down.sql. They are Go
// templates: {{.Table}} is the quoted, schema-qualified outbox table,
// {{name "suffix"}} the quoted name of an object belonging to it (indexes,
// constraints), {{related "suffix"}} the schema-qualified name of a helper
// table, and {{schema}} the quoted schema, so one database can hold several
// outbox tables. Identifiers
// are validated and quoted, never pasted raw.
//
// Every run takes a transaction-scoped advisory lock for its schema first, so
// replicas may run `migrate up` at the same moment: one applies, the others
// wait and then find nothing to do. A run applies all pending migrations in
// one transaction, so a failure leaves the schema as it was.
//
// PrepareOrdered is the step that turning ordered delivery on adds
// (`relay migrate up --ordered`): the primary key half full.
package migrations
