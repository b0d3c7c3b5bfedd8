package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// database is the store the relays claim from, as the harness sees it: a
// private server the harness can crash and restart, the outbox table
// migrated on it, and the harness's own connections to it (not proxied),
// through which the producer writes and the harness counts rows. The
// relays reach it through their slots' fault proxies.
type database interface {
	// start starts the server and opens the harness's connections,
	// registering their shutdown with t.Cleanup.
	start(ctx context.Context, t *testing.T)
	// migrate creates the outbox table, prepared for ordered delivery
	// when ordered; bin is the relay binary.
	migrate(ctx context.Context, t *testing.T, bin string, ordered bool)
	// where describes the server, for the log.
	where() string
	// upstream is the server's host:port, which the slots' proxies
	// forward to.
	upstream() string
	// kinds renames the fault kinds that act on the database (pg-*) to
	// this database's, leaving the others as they are.
	kinds(all []string) []string
	// relayArgs are the flags and environment variables that connect a
	// relay named name to the database through proxy addr, with the claim
	// mode of slot and ordered as its ordered topic ("" for none).
	relayArgs(ctx context.Context, slot int, name, addr, ordered string) (args, env []string, err error)
	// restart crashes the server and starts it again on the same data.
	restart(ctx context.Context) error
	// begin starts a producer transaction.
	begin(ctx context.Context) (dbTx, error)
	// insertMalformed inserts a row by hand, bypassing the writer.
	insertMalformed(ctx context.Context, topic, headers string) error
	// statuses counts the outbox rows by status.
	statuses(ctx context.Context) (map[string]int, error)
	// failed lists the failed rows as "topic: last_error".
	failed(ctx context.Context) ([]string, error)
	// holding counts the outbox rows the relay process name holds
	// claimed; 0 when the server does not answer.
	holding(ctx context.Context, name string) int
	// activeStatements counts the relay process's statements still
	// running on the server; -1 when the server does not answer.
	activeStatements(ctx context.Context, name string) int
	// effects makes the inbox consumers' database on the server
	// (inbox_store_test.go).
	effects(ctx context.Context, t *testing.T) effects
	// logTail is the end of the server's log, for a failed run.
	logTail() string
}

// dbTx is one producer transaction.
type dbTx interface {
	// executor is what the outbox writer writes through.
	executor() outbox.Executor
	// commit commits; its error leaves the outcome unknown.
	commit(ctx context.Context) error
	// rollback rolls back; it is a no-op after commit.
	rollback(ctx context.Context)
}

// databaseNames are the values of OUTBOX_CHAOS_DB; postgres is the default.
var databaseNames = []string{"postgres", "mariadb"}

// databaseFromEnv returns the database OUTBOX_CHAOS_DB names.
func databaseFromEnv() (string, database, error) {
	name := os.Getenv("OUTBOX_CHAOS_DB")
	if name == "" {
		name = "postgres"
	}
	switch name {
	case "postgres":
		return name, &postgresDB{}, nil
	case "mariadb":
		return name, &mariadbDB{}, nil
	}
	return name, nil, fmt.Errorf("OUTBOX_CHAOS_DB=%q: want one of %v", name, databaseNames)
}
