package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// TestInboxMigratesApartFromTheOutbox: the inbox table has its own
// versions table, so a schema may hold an inbox without an outbox.
func TestInboxMigratesApartFromTheOutbox(t *testing.T) {
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		pool, table := testdb.NewEmpty(t)
		table.Name = "" // the default: inbox
		if err := migrations.CheckInbox(ctx, pool, table); !errors.Is(err, migrations.ErrNotMigrated) {
			t.Fatalf("CheckInbox before Up: %v, want ErrNotMigrated", err)
		}
		for i, want := range []int{1, 0} {
			applied, err := migrations.UpInbox(ctx, pool, table)
			if err != nil || len(applied) != want {
				t.Fatalf("UpInbox #%d: %v, %v; want %d applied", i+1, applied, err, want)
			}
		}
		if err := migrations.CheckInbox(ctx, pool, table); err != nil {
			t.Fatalf("CheckInbox: %v", err)
		}
		if err := migrations.Check(ctx, pool, outbox.Table{Schema: table.Schema}); !errors.Is(err, migrations.ErrNotMigrated) {
			t.Fatalf("the outbox's Check in the inbox's schema: %v, want ErrNotMigrated", err)
		}
		states, err := migrations.StatusInbox(ctx, pool, table)
		if err != nil || len(states) != 1 || !states[0].Applied() {
			t.Fatalf("StatusInbox: %+v, %v", states, err)
		}
		if m, ok, err := migrations.DownInbox(ctx, pool, table); !ok || err != nil || m.Version != 1 {
			t.Fatalf("DownInbox: %v %v %v", m, ok, err)
		}
		if err := migrations.CheckInbox(ctx, pool, table); !errors.Is(err, migrations.ErrNotMigrated) {
			t.Fatalf("CheckInbox after Down: %v, want ErrNotMigrated", err)
		}
	})
	t.Run("mariadb", func(t *testing.T) {
		db, _ := mariadbtest.DB(t)
		var table outbox.Table // inbox in the connection's database
		for i, want := range []int{1, 0} {
			applied, err := migrations.UpMySQLInbox(ctx, db, table)
			if err != nil || len(applied) != want {
				t.Fatalf("UpMySQLInbox #%d: %v, %v; want %d applied", i+1, applied, err, want)
			}
		}
		if err := migrations.CheckMySQLInbox(ctx, db, table); err != nil {
			t.Fatalf("CheckMySQLInbox: %v", err)
		}
		if err := migrations.CheckMySQL(ctx, db, table); !errors.Is(err, migrations.ErrNotMigrated) {
			t.Fatalf("the outbox's CheckMySQL beside the inbox: %v, want ErrNotMigrated", err)
		}
		states, err := migrations.StatusMySQLInbox(ctx, db, table)
		if err != nil || len(states) != 1 || !states[0].Applied() {
			t.Fatalf("StatusMySQLInbox: %+v, %v", states, err)
		}
		if m, ok, err := migrations.DownMySQLInbox(ctx, db, table); !ok || err != nil || m.Version != 1 {
			t.Fatalf("DownMySQLInbox: %v %v %v", m, ok, err)
		}
		if err := migrations.CheckMySQLInbox(ctx, db, table); !errors.Is(err, migrations.ErrNotMigrated) {
			t.Fatalf("CheckMySQLInbox after Down: %v, want ErrNotMigrated", err)
		}
	})
}
