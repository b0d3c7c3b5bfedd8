// Package relay claims committed outbox rows, publishes them through a
// publishers.Publisher and records the outcome, so that every committed event
// reaches the sink at least once.
//
// Any number of replicas may run against one table. Each claims a batch in a
// single statement (due pending rows, plus processing rows whose lease ran
// out) with FOR UPDATE SKIP LOCKED, stamping them with a token of the claim
// (locked_by = "<replica id>#<n>") and a lease end (locked_until) computed by
// the database clock. After publishing it records sent, a retry with
// exponential backoff and jitter, or failed, in statements fenced by
// locked_by = token AND status = 'processing': a claim that lost its lease
// changes nothing. A sink that is down as a whole does not burn attempts: the
// rows are deferred with their attempt given back, and the relay claims
// nothing until the sink answers a probe (publishers.Prober) or a one-row
// batch.
//
// Every batch goes through one pipeline (pipeline.go): claim, decode into
// publish rounds, publish, classify each message's result, record. A claim
// strategy (claim.go) decides how rows are claimed, held and recorded:
// lease claims (ProcessBatch), Run's stream of lease claims, lock claims
// (ClaimLock) and the ordered claims of a leased shard. Every statement is
// run by the database's store (relay/internal/pgstore,
// relay/internal/mysqlstore) behind the contract of relay/internal/store.
// An Observer is told what each step did.
//
// See docs/architecture.md for the row lifecycle and docs/guarantees.md for
// what is promised.
package relay
