package relay

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
)

// In a running relay on a partitioned table, an event below the claims'
// id bound (written two hours ago, due again now) is sent: a look finds
// it.
func TestRunSendsRowsBelowTheClaimBound(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, table, _ := testdb.PartitionedWithPending(t, 20)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, PollInterval: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testdb.AwaitSent(t, pool, table, 20, 30*time.Second)

	r.stream.lease.mu.Lock()
	from := r.stream.floor
	r.stream.lease.mu.Unlock()
	// The claims' id bound on a partitioned table: the first id made a
	// minute before the floor's time (pgstore's claimBoundMargin).
	bound := migrations.BoundID(from.Due.Time.Add(-time.Minute))
	old := uuid.UUID(migrations.BoundID(time.Now().Add(-2 * time.Hour)))
	old[15] = 1
	if !from.Due.Finite() || string(old[:]) >= string(bound[:]) {
		t.Fatalf("claim bound after the drain = %v (floor %+v); want one above %s (the test needs the claims bounded)", bound, from.Due, old)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (id, topic, payload) VALUES ($1, 'orders', '\\x00')", old.String()); err != nil {
		t.Fatal(err)
	}
	testdb.AwaitSent(t, pool, table, 21, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
