// Package relay claims committed outbox rows, publishes them through a
// Publisher and records the outcome, so that every committed event reaches
// the sink at least once.
//
// Any number of replicas may run against one table. Each claims a batch in a
// single statement (due pending rows, plus processing rows whose lease ran
// out) with FOR UPDATE SKIP LOCKED, stamping them with its id (locked_by) and
// a lease end (locked_until) computed by the database clock. After
// publishing it records sent, a retry with exponential backoff and jitter, or
// failed, in statements fenced by locked_by = me AND status = 'processing': a
// replica that lost its lease changes nothing. A sink that is down as a whole
// does not burn attempts; the rows are released and the relay backs off.
//
// See docs/architecture.md for the row lifecycle and docs/guarantees.md for
// what is promised.
package relay
