package mysqldsn_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
)

// hostile is a value that closes a string literal under gbk when the
// driver escapes it as utf8mb4 and splices it into the statement text:
// the quote's backslash becomes the second byte of a gbk character.
const hostile = "中'x"

// roundTrip opens cfg, stores v through a parameter and reads it back.
func roundTrip(t *testing.T, cfg *mysql.Config, v string) (string, error) {
	t.Helper()
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return "", err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx := context.Background()
	var got string
	err = db.QueryRowContext(ctx, "SELECT CONVERT(? USING utf8mb4)", v).Scan(&got)
	return got, err
}

// A URL whose connection character set would let a spliced value escape
// its quotes is refused before anything connects, naming the fix; with
// interpolateParams=false (server-side prepared statements) the same
// character set is accepted, and the value travels apart from the SQL.
func TestUnsafeCharsetIsRefused(t *testing.T) {
	t.Parallel()
	_, dsn := mariadbtest.DB(t)
	base, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	url := mysqldsn.URL(base)
	for _, q := range []string{"charset=gbk", "charset=utf8mb4,sjis", "collation=big5_chinese_ci", "charset=cp932",
		"character_set_client=gbk", "Character_Set_Client=%27gb18030%27", "@@session.character_set_client=sjis", "collation=gbk_bin&charset=gbk", "charset=euckr"} {
		_, err := mysqldsn.ParseURL(url + "?" + q)
		if !errors.Is(err, mysqldsn.ErrUnsafeCharset) || !errors.Is(err, mysqldsn.ErrInvalid) || !strings.Contains(err.Error(), "interpolateParams=false") {
			t.Errorf("%s: %v, want ErrUnsafeCharset naming the fix", q, err)
		}
	}
	for _, q := range []string{"charset=utf8mb4", "charset=utf8,latin1", "collation=utf8mb4_unicode_ci", "charset=ascii", "character_set_client=%27utf8mb4%27", ""} {
		cfg, err := mysqldsn.ParseURL(url + "?" + q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		// latin1 and ascii have no 中 (it comes back as ?), but the quote
		// stays inside the value.
		if got, err := roundTrip(t, cfg, hostile); err != nil || !strings.HasSuffix(got, "'x") {
			t.Errorf("%s: %q, %v; want %q", q, got, err, hostile)
		}
	}
	// gbk with server-side prepared statements: the value travels apart
	// from the SQL (the server reads its UTF-8 bytes as gbk, but the
	// quote is data).
	cfg, err := mysqldsn.ParseURL(url + "?charset=gbk&interpolateParams=false")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(t, cfg, hostile); err != nil || !strings.HasSuffix(got, "'x") {
		t.Errorf("gbk without interpolation: %q, %v; want the value back", got, err)
	}
	// A driver DSN is held to the same rule.
	if _, err := mysqldsn.Parse("root@tcp(127.0.0.1:3306)/x?interpolateParams=true&charset=gbk"); !errors.Is(err, mysqldsn.ErrUnsafeCharset) {
		t.Errorf("DSN with gbk and interpolateParams: %v", err)
	}
}

// A server that imposes its own character set on every session
// (--skip-character-set-client-handshake, gbk) does not make the relay's
// connections splice values under gbk: they set their character set
// themselves.
func TestServerCharsetIsNotTrusted(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Private(t, "--character-set-server=gbk", "--collation-server=gbk_chinese_ci", "--skip-character-set-client-handshake")
	base, err := mysqldsn.Parse(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysqldsn.ParseURL(mysqldsn.URL(base))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(t, cfg, hostile); err != nil || got != hostile {
		t.Errorf("%q, %v; want %q", got, err, hostile)
	}
}
