package demo

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
)

// mysqlDemoURL returns a mysql:// URL of the test server naming a fresh
// database, and the name of another for the demo to create, dropped when
// the test ends.
func mysqlDemoURL(t *testing.T) (dbURL, schema string) {
	_, dbURL, schema = mysqlDemoDB(t)
	return dbURL, schema
}

// mysqlDemoDB is mysqlDemoURL with a pool on the URL's database.
func mysqlDemoDB(t *testing.T) (db *sql.DB, dbURL, schema string) {
	t.Helper()
	db, dsn := mariadbtest.DB(t)
	mc, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(mc.User, mc.Passwd), Host: mc.Addr, Path: "/" + mc.DBName}
	if mc.Passwd == "" {
		u.User = url.User(mc.User)
	}
	schema = mc.DBName + "_demo"
	t.Cleanup(func() {
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + schema); err != nil {
			t.Errorf("drop the demo's database: %v", err)
		}
	})
	return db, u.String(), schema
}

// A mysql:// URL that names a database: the demo says it leaves that
// database alone and which one it drops and creates instead, and does so.
func TestMySQLDemoSaysWhichDatabaseItRecreates(t *testing.T) {
	t.Parallel()
	db, dbURL, schema := mysqlDemoDB(t)
	if _, err := db.Exec("CREATE TABLE keep (id int)"); err != nil { // a table of the user's
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg := Config{DatabaseURL: dbURL, Schema: schema, Out: &out, Relays: 1, Writers: 1}
	d, err := openMySQL(context.Background(), cfg)
	if err != nil {
		t.Fatalf("openMySQL: %v\n%s", err, out.String())
	}
	t.Cleanup(d.close)
	mc, err := mysqldsn.ParseURL(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("the URL's database %s is left alone: the demo drops and creates a database of its own, %s (--schema)", mc.DBName, cfg.Schema),
		fmt.Sprintf("database %s dropped, created and migrated", cfg.Schema),
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil || n != 1 {
		t.Errorf("the URL's database holds %d tables (%v), want its own one", n, err)
	}
}
