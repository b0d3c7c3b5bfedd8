package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Retry the failed events of one topic whose error says the broker timed
// out, then replay what was sent in the last hour to a consumer that lost
// it. Every change is fenced by state and recorded in the audit trail.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	adm, err := admin.New(pool, admin.Config{Table: outbox.Table{Schema: "billing"}, Actor: "reconciler@billing-7"})
	if err != nil {
		log.Fatal(err)
	}

	res, err := adm.RetryFailed(ctx, admin.Filter{Topics: []string{"invoices.issued"}, ErrorContains: "timed out"}, admin.ActionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("retried %d rows (audit entry %d)\n", res.Rows, res.AuditID)

	now, err := adm.Now(ctx) // the database clock
	if err != nil {
		log.Fatal(err)
	}
	res, err = adm.Replay(ctx, admin.ReplayFilter{
		Topics: []string{"invoices.issued"},
		Sent:   admin.TimeRange{From: now.Add(-time.Hour)},
	}, admin.ActionOptions{})
	var gone *admin.NotFoundError
	switch {
	case errors.As(err, &gone):
		fmt.Println("deleted by retention:", gone.IDs)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("replayed %d rows\n", res.Rows)
	}
}
