package admin_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/go-sql-driver/mysql"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The same Admin on MySQL or MariaDB: a database/sql pool whose DATETIMEs
// are UTC (parseTime, loc=UTC), and the table's database as its schema.
func ExampleNewMySQL() {
	ctx := context.Background()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "ops", "tcp", "db.example:3306", "billing"
	cfg.ParseTime = true // cfg.Loc is UTC by default
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	adm, err := admin.NewMySQL(db, admin.Config{Table: outbox.Table{Schema: "billing"}, Actor: "reconciler@billing-7"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := adm.Status(ctx, admin.StatusOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d due, %d failed\n", st.Table, st.Totals.PendingDue, st.Totals.Failed)
	res, err := adm.PurgeFailed(ctx, admin.Filter{Topics: []string{"invoices.draft"}}, admin.ActionOptions{DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a purge would delete %d rows\n", res.Rows)
}
