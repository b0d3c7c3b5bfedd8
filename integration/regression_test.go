package integration

// Regression tests for defects found in review; each failed before its fix.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// A publish that takes longer than the lease, but is alive (the heartbeat
// keeps extending the lease, as Config.PublishTimeout documents), must still
// have its outcome recorded. ProcessBatch once bounded its write-backs by a
// context created before the claim with a timeout of Lease, so after such a
// publish the mark-sent statement ran on an expired context and the rows
// were published a second time in a fault-free run.
func TestSlowPublishWithinPublishTimeoutIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.write(outbox.Message{Topic: "orders", Payload: []byte("slow")})[0]
	const lease = time.Second
	s := &sink{fn: func(ctx context.Context, _ []outbox.Message) error {
		select {
		case <-time.After(lease + 500*time.Millisecond): // slow but alive
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	r := b.newRelay(s, relay.Config{Lease: lease, PublishTimeout: 10 * time.Second})
	res, err := r.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Errorf("ProcessBatch after a publish slower than the lease: %v", err)
	}
	if want := (relay.BatchResult{Claimed: 1, Sent: 1}); res != want {
		t.Errorf("ProcessBatch = %+v, want %+v", res, want)
	}
	if row := b.row(id); row.Status != "sent" {
		t.Errorf("row acknowledged by the sink is %s, not sent: it will be published again after the lease", row.Status)
	}
}

// WriteBatch reports duplicates by which ids came back from the INSERT; two
// messages carrying the same explicit ID in one batch both find "their" id
// in the inserted set, so the second is not flagged although only one row
// was written.
func TestWriteBatchSameIDTwiceInOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := uuid.Must(uuid.NewV7())
	res, err := b.writer.WriteBatch(b.ctx, b.pool, []outbox.Message{
		{ID: id, Topic: "orders", Payload: []byte("first")},
		{ID: id, Topic: "orders", Payload: []byte("second")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count("true"); n != 1 {
		t.Fatalf("%d rows written, want 1", n)
	}
	if res[0].Duplicate || !res[1].Duplicate {
		t.Errorf("Duplicate flags = %v, %v; want false, true (one row was written for two messages)", res[0].Duplicate, res[1].Duplicate)
	}
}

// A message whose explicit ID exists already, with a DedupKey no row holds,
// is a duplicate by its ID: Result.ID must be that ID, not uuid.Nil.
func TestDuplicateByIDWithFreshDedupKeyReportsTheID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.write(outbox.Message{Topic: "orders", Payload: []byte("first")})[0]
	res, err := b.writer.Write(b.ctx, b.pool, outbox.Message{ID: id, Topic: "orders", Payload: []byte("again"), DedupKey: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || res.ID != id {
		t.Errorf("Write = %+v, want Duplicate with ID %v", res, id)
	}
	batch, err := b.writer.WriteBatch(b.ctx, b.pool, []outbox.Message{{ID: id, Topic: "orders", Payload: []byte("again"), DedupKey: "fresh2"}})
	if err != nil {
		t.Fatal(err)
	}
	if !batch[0].Duplicate || batch[0].ID != id {
		t.Errorf("WriteBatch = %+v, want Duplicate with ID %v", batch[0], id)
	}
}

// Several outbox tables may share a schema (package migrations says so), but
// migrations.Up once serialised runs per table only: runs for two tables of
// a schema that did not exist yet both executed CREATE SCHEMA IF NOT EXISTS
// concurrently, and all but one failed with a unique violation on
// pg_namespace (SQLSTATE 23505).
func TestMigrationsConcurrentUpOfTablesInOneNewSchema(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		pool, table := testdb.NewEmpty(t)
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				tb := outbox.Table{Schema: table.Schema, Name: fmt.Sprintf("outbox_%d", i)}
				if _, err := migrations.Up(context.Background(), pool, tb); err != nil {
					t.Errorf("round %d: Up(%s): %v", round, tb, err)
				}
			})
		}
		wg.Wait()
	}
}

// The owner of an existing schema, without the CREATE privilege on the
// database, must be able to run migrations: CREATE SCHEMA IF NOT EXISTS
// needs that privilege even when the schema exists, so it runs only when
// the schema is missing.
func TestMigrateAsSchemaOwnerWithoutDatabaseCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, table := testdb.NewEmpty(t)
	role := table.Schema + "_owner"
	ident := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + ident + " LOGIN",
		"CREATE SCHEMA " + pgx.Identifier{table.Schema}.Sanitize() + " AUTHORIZATION " + ident,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The schema (dropped by testdb's cleanup, registered earlier, so
		// run later) must go first; drop it here to free the role.
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE")
		if _, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+ident); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	owner, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	var canCreate bool
	if err := owner.QueryRow(ctx, "SELECT has_database_privilege(current_database(), 'CREATE')").Scan(&canCreate); err != nil || canCreate {
		t.Fatalf("test role can create in the database (%v): the test proves nothing", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := migrations.Up(ctx, owner, table); err != nil {
			t.Fatalf("migrate up #%d as the schema owner: %v", i+1, err)
		}
	}
	if err := migrations.Check(ctx, owner, table); err != nil {
		t.Fatalf("check after migrating: %v", err)
	}
}
