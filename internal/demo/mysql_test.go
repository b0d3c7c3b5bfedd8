package demo

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
)

// A mysql:// URL that names a database: the demo says it leaves that
// database alone and which one it drops and creates instead, and does so.
func TestMySQLDemoSaysWhichDatabaseItRecreates(t *testing.T) {
	t.Parallel()
	db, dsn := mariadbtest.DB(t) // the URL's database, holding a table of the user's
	if _, err := db.Exec("CREATE TABLE keep (id int)"); err != nil {
		t.Fatal(err)
	}
	mc, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(mc.User, mc.Passwd), Host: mc.Addr, Path: "/" + mc.DBName}
	if mc.Passwd == "" {
		u.User = url.User(mc.User)
	}
	var out bytes.Buffer
	cfg := Config{DatabaseURL: u.String(), Schema: mc.DBName + "_demo", Out: &out, Relays: 1, Writers: 1}
	d, err := openMySQL(context.Background(), cfg)
	if err != nil {
		t.Fatalf("openMySQL: %v\n%s", err, out.String())
	}
	t.Cleanup(func() {
		_, _ = d.db.Exec("DROP DATABASE " + cfg.Schema)
		d.close()
	})
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
