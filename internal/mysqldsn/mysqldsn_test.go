package mysqldsn

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	cfg, err := ParseURL("mysql://app:p%40ss%2Fw:rd@db.example:3307/shop?wait_timeout=60")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "p@ss/w:rd" || cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "shop" {
		t.Errorf("got user %q password %q net %q addr %q db %q", cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName)
	}
	if !cfg.ParseTime || cfg.Loc != time.UTC || !cfg.InterpolateParams || cfg.Params["time_zone"] != "'+00:00'" || cfg.Params["wait_timeout"] != "60" {
		t.Errorf("settings not added: parseTime %v loc %v interpolateParams %v params %v", cfg.ParseTime, cfg.Loc, cfg.InterpolateParams, cfg.Params)
	}

	// The URL's own settings win; mariadb:// is the same; no port is 3306.
	cfg, err = ParseURL("MariaDB://root@localhost/?parseTime=false&interpolateParams=false&loc=Local&time_zone=%27SYSTEM%27")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ParseTime || cfg.InterpolateParams || cfg.Loc != time.Local || cfg.Params["time_zone"] != "'SYSTEM'" {
		t.Errorf("URL settings overridden: parseTime %v interpolateParams %v loc %v params %v", cfg.ParseTime, cfg.InterpolateParams, cfg.Loc, cfg.Params)
	}
	if cfg.Addr != "localhost:3306" || cfg.DBName != "" || cfg.Passwd != "" {
		t.Errorf("addr %q db %q password %q", cfg.Addr, cfg.DBName, cfg.Passwd)
	}
}

func TestParseErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"mysql://app:hunter2@db/a/b",
		"mysql://app:hunter2@db/x?parseTime=maybe",
		"mysql://app:hunter2@[::1/x",
		"mysql:app:hunter2@db",
		"postgres://app:hunter2@db/x",
	} {
		_, err := ParseURL(s)
		if err == nil {
			t.Errorf("%s: no error", s)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v does not wrap ErrInvalid", s, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", s, err)
		}
	}
}

func TestParseDSN(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("root:pw@tcp(127.0.0.1:3306)/db?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "root" || cfg.Passwd != "pw" || cfg.DBName != "db" || !cfg.ParseTime || cfg.InterpolateParams {
		t.Errorf("got %+v", cfg)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"mysql://app:hunter2@db:3306/shop?tls=true": "mysql://app:xxxxx@db:3306/shop?tls=true",
		"mariadb://app@db/shop":                     "mariadb://app@db/shop",
		"app:hun@ter2@tcp(db:3306)/shop":            "app:xxxxx@tcp(db:3306)/shop",
		"app@tcp(db:3306)/shop":                     "app@tcp(db:3306)/shop",
		"mysql://app:hunter2@[::1/x":                "(unparseable database URL)",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestURLRoundTrips(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("app:p@ss@tcp(db:3307)/shop")
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseURL(URL(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if back.User != "app" || back.Passwd != "p@ss" || back.Addr != "db:3307" || back.DBName != "shop" {
		t.Errorf("URL(%+v) = %s read back as %+v", cfg, URL(cfg), back)
	}
}
