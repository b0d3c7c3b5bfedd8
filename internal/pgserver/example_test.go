package pgserver_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/internal/pgserver"
)

// A committed row survives a crash-like restart; the connection open at the
// time does not.
func ExampleServer_Restart() {
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		log.Fatal(err)
	}

	if err := srv.Restart(ctx, pgserver.ImmediateMode); err != nil {
		log.Fatalf("%v\n%s", err, srv.LogTail(20))
	}

	conn2, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn2.Close(ctx)
	var v int
	if err := conn2.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil {
		log.Fatal(err)
	}
	fmt.Println(v)
	// Output: 42
}
