// Package integration holds the end-to-end tests of the outbox relay: they
// run against a real PostgreSQL server (OUTBOX_TEST_DATABASE_URL, one schema
// per test) and, for everything that reaches Kafka, against kfake on loopback
// TCP through the real kafka-go client, with kcat as an independent
// librdkafka consumer.
//
// Run them with:
//
//	OUTBOX_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go test -race ./integration/
//
// The package has no non-test code apart from this comment.
package integration
