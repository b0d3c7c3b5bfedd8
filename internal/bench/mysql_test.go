package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
)

// newMySQLConfig returns a burn-down config on a fresh MariaDB database
// (mariadbtest.DB) whose mysql:// URL names it; the benchmark's own
// databases, <database>_b and <database>_b_ceiling, are dropped when the
// test ends.
func newMySQLConfig(t *testing.T) (Config, *sql.DB) {
	t.Helper()
	db, dsn := mariadbtest.DB(t)
	mc, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := mc.DBName + "_b"
	t.Cleanup(func() { // before mariadbtest's own cleanup closes db
		for _, name := range []string{schema, schema + ceilingSuffix} {
			if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
	return Config{
		Mode: ModeBurnDown, DatabaseURL: mysqldsn.URL(mc), Schema: schema, RelayBinary: relayBin, BrokerBinary: benchBin,
		Relays: []int{1}, PollInterval: 10 * time.Millisecond, Timeout: 2 * time.Minute, Progress: testWriter{t},
	}, db
}

// databaseExists reports whether the server has the database.
func databaseExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(mysqlDatabaseExistsSQL, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A burn-down on MariaDB: the ceiling runs both MySQL lifecycles at one
// and two clients, the relay drains every event once, and the report
// (table and JSON) says it ran on MySQL with the ratio to the ceiling.
func TestBurnDownMySQL(t *testing.T) {
	t.Parallel()
	cfg, db := newMySQLConfig(t)
	cfg.Events, cfg.BatchSize, cfg.CeilingRows = 2000, 100, 4000
	rep := run(t, cfg)

	if rep.Settings.Database != "mysql" || !strings.Contains(rep.Settings.ServerVersion, "MariaDB") {
		t.Errorf("settings say database %q, server %q: want mysql, MariaDB", rep.Settings.Database, rep.Settings.ServerVersion)
	}
	if len(rep.Ceiling) != 4 {
		t.Fatalf("ceiling %+v: want 2 lifecycles x 2 client counts", rep.Ceiling)
	}
	lifecycles := map[string]int{}
	for _, c := range rep.Ceiling {
		lifecycles[c.Lifecycle]++
		if want := ceilingIterations(4000, 100, c.Clients) * 100 * c.Clients; c.Events != want || c.Seconds <= 0 || c.EventsPerSecond <= 0 {
			t.Errorf("ceiling %+v: want %d events at a positive rate", c, want)
		}
	}
	if lifecycles[LifecycleMarkSent] != 2 || lifecycles[LifecycleMarkSentInClaim] != 2 {
		t.Errorf("ceiling lifecycles %v: want mark_sent and mark_sent_in_claim twice each", lifecycles)
	}

	r := rep.Runs[0]
	if r.Events != 2000 || r.Sent != 2000 || r.Received != 2000 || r.Duplicates != 0 || r.Missing != 0 {
		t.Errorf("events %d, sent %d, received %d, duplicates %d, missing %d: want 2000 drained and delivered once",
			r.Events, r.Sent, r.Received, r.Duplicates, r.Missing)
	}
	if r.Seconds <= 0 || r.EventsPerSecond <= 0 || r.CeilingRatio == nil {
		t.Fatalf("seconds %v, events/s %v, ceiling ratio %v: want all positive", r.Seconds, r.EventsPerSecond, r.CeilingRatio)
	}
	if want := r.EventsPerSecond / mainCeiling(rep.Ceiling); *r.CeilingRatio != want || want <= 0 {
		t.Errorf("ceiling ratio %v, want %v (events/s over the faster one-client lifecycle)", *r.CeilingRatio, want)
	}
	if r.Claim == nil || r.ClaimSource != "observer" || r.Batches < 20 {
		t.Errorf("claim %v from %q, %d batches: want the relays' own timings of at least 20 batches", r.Claim, r.ClaimSource, r.Batches)
	}
	if r.DBBackendCPUSeconds != nil || r.OldestXactSeconds != nil || r.MarkSent != nil {
		t.Errorf("PostgreSQL-only figures on MySQL: backend CPU %v, oldest xact %v, mark-sent %v: want null",
			r.DBBackendCPUSeconds, r.OldestXactSeconds, r.MarkSent)
	}
	// InnoDB's purge frees index pages whenever it gets to them, so the
	// table may be a page smaller after the run (1982464 -> 1966080 bytes
	// was seen on a busy machine): only the sizes are checked.
	if r.Table.SizeBeforeBytes <= 0 || r.Table.SizeAfterBytes <= 0 {
		t.Errorf("table size %d -> %d bytes: want both positive", r.Table.SizeBeforeBytes, r.Table.SizeAfterBytes)
	}
	checkRelayFigures(t, r)

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "MySQL claim transaction") || !strings.Contains(table.String(), LifecycleMarkSentInClaim) {
		t.Errorf("the table does not describe the MySQL ceiling:\n%s", table.String())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Settings struct {
			Database string `json:"database"`
		} `json:"settings"`
		Runs []struct {
			CeilingRatio *float64 `json:"ceiling_ratio"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Settings.Database != "mysql" || len(doc.Runs) != 1 || doc.Runs[0].CeilingRatio == nil {
		t.Errorf("JSON (%v) lacks database mysql or the ceiling ratio:\n%s", err, b)
	}

	if databaseExists(t, db, cfg.Schema+ceilingSuffix) {
		t.Errorf("the ceiling's database %s outlived the run", cfg.Schema+ceilingSuffix)
	}
}

// The MySQL ceiling runs the relay's statements: its texts are those of
// relay/internal/mysqlstore/sql without their comments.
func TestMySQLCeilingIsTheRelaysStatements(t *testing.T) {
	t.Parallel()
	for file, got := range map[string]string{
		"claim_due": mysqlCeilingClaimSQL, "claim_lease": mysqlCeilingLeaseSQL, "claim_read": mysqlCeilingReadSQL, "mark_sent": mysqlCeilingMarkSentSQL,
	} {
		b, err := os.ReadFile("../../relay/internal/mysqlstore/sql/" + file + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for line := range strings.Lines(string(b)) {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				want.WriteString(line)
			}
		}
		if strings.TrimSpace(want.String()) != got {
			t.Errorf("the ceiling's %s differs from the relay's:\n%s\n\nrelay:\n%s", file, got, want.String())
		}
	}
}

// A mysql:// URL is refused, naming the field, in the modes and with the
// options that need PostgreSQL, and for a schema Run must not drop.
func TestMySQLConfigRefused(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeBurnDown, DatabaseURL: "mysql://root@127.0.0.1:3306/test", RelayBinary: "relay", BrokerBinary: "relay-bench"}
	cases := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"steady", func(c *Config) { c.Mode = ModeSteady }, "DatabaseURL"},
		{"idle", func(c *Config) { c.Mode = ModeIdle }, "DatabaseURL"},
		{"soak", func(c *Config) { c.Mode = ModeSoak }, "DatabaseURL"},
		{"hold snapshot", func(c *Config) { c.HoldSnapshot = true }, "HoldSnapshot"},
		{"no notify", func(c *Config) { c.NoNotify = true }, "NoNotify"},
		{"the URL's database", func(c *Config) { c.Schema = "Test" }, "Schema"},
		{"a server database", func(c *Config) { c.Schema = "mysql" }, "Schema"},
		{"too long", func(c *Config) { c.Schema = strings.Repeat("a", 60) }, "Schema"},
		{"bad URL", func(c *Config) { c.DatabaseURL = "mysql://root@127.0.0.1:3306/test?timeout=soon" }, "DatabaseURL"},
	}
	for _, c := range cases {
		cfg := base
		c.edit(&cfg)
		_, err := Run(context.Background(), cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: %v, want a ConfigError about %s", c.name, err, c.field)
		}
	}
	if err := base.withDefaults().validate(); err != nil {
		t.Errorf("burn-down on MySQL with defaults: %v", err)
	}
}

// Run drops only databases it made: a database of the schema's name
// without the benchmark's marker is refused with ErrForeignSchema and
// left alone.
func TestMySQLForeignDatabaseKept(t *testing.T) {
	t.Parallel()
	cfg, db := newMySQLConfig(t)
	if _, err := db.Exec("CREATE DATABASE `" + cfg.Schema + "`"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE `" + cfg.Schema + "`.mine (id INT)"); err != nil {
		t.Fatal(err)
	}
	cfg.Events, cfg.NoCeiling = 10, true
	_, err := Run(context.Background(), cfg)
	if !errors.Is(err, ErrForeignSchema) {
		t.Fatalf("Run: %v, want ErrForeignSchema", err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'mine'", cfg.Schema).Scan(&n); err != nil || n != 1 {
		t.Errorf("the foreign database's table: %d (%v), want it kept", n, err)
	}
}
