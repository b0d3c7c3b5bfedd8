// Package pgserver runs a throw-away PostgreSQL server of its own, for tests
// that must crash or restart the database without disturbing other tests
// sharing the machine's main server.
//
// Start runs initdb into a fresh temporary directory and starts postgres
// listening on 127.0.0.1 only (its unix socket lives in the same directory),
// with settings tuned for speed rather than durability against power loss:
// fsync and full_page_writes are off, but synchronous_commit stays on, so a
// committed transaction survives Restart(ctx, ImmediateMode), which recovers
// from the WAL like a crashed server does. Restart keeps the port, so clients
// reconnect to the same URL.
//
// The binaries come from pg_config --bindir when that directory holds
// initdb, else from the highest version under /usr/lib/postgresql, else from
// PATH. initdb and postgres refuse to run as root, so a root process runs
// them as the postgres OS user.
//
// Typical use in a test:
//
//	srv, err := pgserver.Start(ctx, pgserver.Options{})
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { _ = srv.Close() })
//	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
//	...
//	err = srv.Restart(ctx, pgserver.ImmediateMode) // conn is now broken
package pgserver
