package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// mariadbDB is the MariaDB profile (OUTBOX_CHAOS_DB=mariadb): a private
// mariadbd (internal/mariadbtest) with a database of the run's own,
// migrated with migrations.UpMySQL; producers write with
// outbox.FromMySQL; relays run `relay run --database-url mysql://...`.
//
// Each relay process connects as a MariaDB user of its own name (created
// before it starts, with every privilege on the run's database and none
// elsewhere), so that the harness finds its sessions in the process list,
// as it finds a PostgreSQL relay's by application_name.
//
// Lock claims, which the relay refuses on MySQL and MariaDB, are left
// out: every slot takes lease claims.
type mariadbDB struct {
	srv    *mariadbtest.Server
	db     *sql.DB // the harness's own connections (root), not proxied
	dbName string
}

// Fault kinds that act on MariaDB: pg-restart, pg-cut, pg-stall and
// pg-slow of the PostgreSQL profile; mariadb-restart kills mariadbd
// (SIGKILL, InnoDB recovers at the next start) and starts it again.
const (
	mariadbRestart = "mariadb-restart"
	mariadbCut     = "mariadb-cut"
	mariadbStall   = "mariadb-stall"
	mariadbSlow    = "mariadb-slow"
)

// mariadbKinds maps the PostgreSQL fault kinds to MariaDB's.
var mariadbKinds = map[string]string{pgRestart: mariadbRestart, pgCut: mariadbCut, pgStall: mariadbStall, pgSlow: mariadbSlow}

// relayHost is the host the relays' users are created for: their
// connections come from the slots' proxies on the loopback address.
const relayHost = "127.0.0.1"

func (d *mariadbDB) start(_ context.Context, t *testing.T) {
	d.srv = mariadbtest.Private(t)
	var dsn string
	d.db, dsn = d.srv.DB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	d.dbName = cfg.DBName
}

// migrate runs migrations.UpMySQL on the run's database, not proxied,
// and prepares it for ordered delivery (relay migrate up --ordered) when
// ordered.
func (d *mariadbDB) migrate(ctx context.Context, t *testing.T, _ string, ordered bool) {
	applied, err := migrations.UpMySQL(ctx, d.db, outbox.Table{})
	if err != nil {
		t.Fatalf("migrations.UpMySQL: %v", err)
	}
	if len(applied) == 0 {
		t.Fatal("migrations.UpMySQL applied nothing to a fresh database")
	}
	if ordered {
		if _, err := migrations.PrepareOrderedMySQL(ctx, d.db, outbox.Table{}); err != nil {
			t.Fatalf("migrations.PrepareOrderedMySQL: %v", err)
		}
	}
}

func (d *mariadbDB) where() string    { return "MariaDB on " + d.srv.Addr() + ", database " + d.dbName }
func (d *mariadbDB) upstream() string { return d.srv.Addr() }
func (d *mariadbDB) logTail() string  { return "" } // mariadbtest keeps the error log to itself

func (d *mariadbDB) kinds(all []string) []string {
	out := make([]string, len(all))
	for i, k := range all {
		out[i] = k
		if m, ok := mariadbKinds[k]; ok {
			out[i] = m
		}
	}
	return out
}

// quoteAccount quotes name as a MariaDB account 'name'@'127.0.0.1'.
func quoteAccount(name string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return q(name) + "@" + q(relayHost)
}

// relayArgs creates the process's user and names it in a mysql:// URL.
// The relay gets lease claims and the ordered topics.
func (d *mariadbDB) relayArgs(ctx context.Context, _ int, name, addr, ordered string) (args, env []string, err error) {
	account := quoteAccount(name)
	if _, err := d.db.ExecContext(ctx, "CREATE USER IF NOT EXISTS "+account); err != nil {
		return nil, nil, fmt.Errorf("create user %s: %w", account, err)
	}
	if _, err := d.db.ExecContext(ctx, "GRANT ALL PRIVILEGES ON `"+d.dbName+"`.* TO "+account); err != nil {
		return nil, nil, fmt.Errorf("grant %s: %w", account, err)
	}
	url := fmt.Sprintf("mysql://%s@%s/%s", name, addr, d.dbName)
	return []string{"--database-url", url, "--claim-mode", "lease", "--ordered-topics", ordered, "--shards", "8"}, nil, nil
}

// restart kills mariadbd like a crash and starts it on the same data;
// Start returns once InnoDB has recovered and the server answers.
func (d *mariadbDB) restart(context.Context) error {
	if err := d.srv.Kill(); err != nil {
		return err
	}
	return d.srv.Start()
}

// begin starts a transaction that is not tied to ctx: database/sql would
// roll it back when ctx ends, and a producer stopped between its last
// write and COMMIT must still commit (as pgTx does). A statement cut
// short by ctx breaks the connection instead, which rolls it back.
func (d *mariadbDB) begin(ctx context.Context) (dbTx, error) {
	tx, err := d.db.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, err
	}
	return mysqlTx{tx}, nil
}

// mysqlTx is a producer transaction on MariaDB.
type mysqlTx struct{ tx *sql.Tx }

func (x mysqlTx) executor() outbox.Executor    { return outbox.FromMySQL(x.tx) }
func (x mysqlTx) commit(context.Context) error { return x.tx.Commit() }
func (x mysqlTx) rollback(context.Context)     { _ = x.tx.Rollback() }
func (d *mariadbDB) insertMalformed(ctx context.Context, topic, headers string) error {
	id := uuid.Must(uuid.NewV7())
	_, err := d.db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload, headers) VALUES (?, ?, 'malformed', ?)", id[:], topic, headers)
	return err
}

func (d *mariadbDB) statuses(ctx context.Context) (map[string]int, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT status, count(*) FROM outbox GROUP BY status")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

func (d *mariadbDB) failed(ctx context.Context) ([]string, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT CONCAT(topic, ': ', COALESCE(last_error, '')) FROM outbox WHERE status = 'failed' ORDER BY 1")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// holding counts the rows processing under one of the process's claim
// tokens (name#n). Rows a claim transaction has locked but not yet leased
// are not counted: they are still pending once it commits or dies.
func (d *mariadbDB) holding(ctx context.Context, name string) int {
	var n int
	err := d.db.QueryRowContext(ctx, "SELECT count(*) FROM outbox WHERE status = 'processing' AND locked_by LIKE CONCAT(?, '#%')", name).Scan(&n)
	if err != nil {
		return 0 // the server may be restarting: the caller retries
	}
	return n
}

// activeStatements counts the sessions of the process's user that are
// running a statement.
func (d *mariadbDB) activeStatements(ctx context.Context, name string) int {
	var n int
	err := d.db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND HOST LIKE CONCAT(?, ':%') AND COMMAND = 'Query'",
		name, relayHost).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// TestMariaDBSessions checks what the faults rely on to land mid-batch on
// MariaDB: a relay process's user connects through the URL relayArgs
// gives it, its running statements are counted and no one else's, and
// holding counts the rows leased under its tokens alone (r0.1 is not
// r0.10).
func TestMariaDBSessions(t *testing.T) {
	ctx := context.Background()
	d := &mariadbDB{}
	d.start(ctx, t)
	d.migrate(ctx, t, "", false)

	args, _, err := d.relayArgs(ctx, 0, "r0.1", d.srv.Addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(args) < 2 || args[0] != "--database-url" {
		t.Fatalf("relay args %v: want --database-url first", args)
	}
	cfg, err := mariadbtest.ParseDSN(args[1])
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	relayDB := sql.OpenDB(conn)
	defer relayDB.Close()

	for _, h := range []string{`{}`, `{}`, `{}`} {
		if err := d.insertMalformed(ctx, "t", h); err != nil {
			t.Fatal(err)
		}
	}
	// The relay's user can write the table; two rows go to r0.1's tokens,
	// one to r0.10's.
	if _, err := relayDB.ExecContext(ctx, "UPDATE outbox SET status = 'processing', locked_by = 'r0.1#7' ORDER BY id LIMIT 2"); err != nil {
		t.Fatalf("the relay's user cannot update the outbox: %v", err)
	}
	if _, err := relayDB.ExecContext(ctx, "UPDATE outbox SET status = 'processing', locked_by = 'r0.10#1' WHERE status = 'pending'"); err != nil {
		t.Fatal(err)
	}
	if n := d.holding(ctx, "r0.1"); n != 2 {
		t.Errorf("holding(r0.1) = %d, want 2", n)
	}
	if n := d.holding(ctx, "r0.10"); n != 1 {
		t.Errorf("holding(r0.10) = %d, want 1", n)
	}
	st, err := d.statuses(ctx)
	if err != nil || st["processing"] != 3 || len(st) != 1 {
		t.Errorf("statuses = %v, %v; want processing=3", st, err)
	}

	if n := d.activeStatements(ctx, "r0.1"); n != 0 {
		t.Fatalf("activeStatements(r0.1) = %d before any statement, want 0", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := relayDB.ExecContext(ctx, "DO SLEEP(2)")
		done <- err
	}()
	if !await(ctx, 2*time.Second, func() bool { return d.activeStatements(ctx, "r0.1") == 1 }) {
		t.Errorf("activeStatements(r0.1) = %d while it sleeps, want 1", d.activeStatements(ctx, "r0.1"))
	}
	if n := d.activeStatements(ctx, "r0.10"); n != 0 {
		t.Errorf("activeStatements(r0.10) = %d, want 0", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := d.activeStatements(ctx, "r0.1"); n != 0 {
		t.Errorf("activeStatements(r0.1) = %d after its statement, want 0", n)
	}

	if got := d.kinds([]string{kill9, pgRestart, pgCut, pgStall, pgSlow, brokerDown}); !slices.Equal(got,
		[]string{kill9, mariadbRestart, mariadbCut, mariadbStall, mariadbSlow, brokerDown}) {
		t.Errorf("kinds = %v", got)
	}
}
