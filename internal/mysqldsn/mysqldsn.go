// Package mysqldsn reads the MySQL and MariaDB connection strings the relay
// accepts: URLs (mysql://user:password@host:3306/database?param=value, or
// mariadb://) and go-sql-driver/mysql DSNs (user:password@tcp(host:3306)/database),
// and masks their passwords for logs and errors.
package mysqldsn

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Schemes are the URL schemes that name a MySQL or MariaDB server.
var Schemes = []string{"mysql", "mariadb"}

// ErrInvalid is wrapped by every error of Parse and ParseURL. The errors
// never contain the password.
var ErrInvalid = errors.New("invalid MySQL connection string")

// IsURL reports whether s is a URL with one of Schemes (case-insensitive).
func IsURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	for _, want := range Schemes {
		if strings.EqualFold(scheme, want) {
			return true
		}
	}
	return false
}

// Parse reads a URL (IsURL) or a go-sql-driver/mysql DSN and returns its
// config as the driver would, without adding any setting.
func Parse(s string) (*mysql.Config, error) {
	if IsURL(s) {
		cfg, _, err := parseURL(s)
		return cfg, err
	}
	cfg, err := mysql.ParseDSN(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return cfg, nil
}

// ParseURL reads a mysql:// or mariadb:// URL for the relay: the user and
// password of its user information (percent-decoded), host and port (3306
// when none; 127.0.0.1 when no host), the database of its path (none when
// empty) and the driver's parameters of its query. The parameters the
// relay's statements rely on are added unless the query sets them:
// parseTime=true, loc=UTC, time_zone='+00:00' and interpolateParams=true
// (docs/mysql.md#connection-settings).
func ParseURL(s string) (*mysql.Config, error) {
	if !IsURL(s) {
		return nil, fmt.Errorf("%w: not a mysql:// or mariadb:// URL", ErrInvalid)
	}
	cfg, q, err := parseURL(s)
	if err != nil {
		return nil, err
	}
	if !has(q, "parseTime") {
		cfg.ParseTime = true
	}
	if !has(q, "loc") {
		cfg.Loc = time.UTC
	}
	if !has(q, "interpolateParams") {
		cfg.InterpolateParams = true
	}
	if !has(q, "time_zone") {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
	}
	return cfg, nil
}

// has reports whether the query names the parameter, in any case (the
// driver's own parameters are case-sensitive, but a differently-cased one
// is the user's intent, and the driver reports it).
func has(q url.Values, name string) bool {
	for k := range q {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// parseURL turns the URL into a config through the driver's DSN parser
// for the address, database and parameters; user and password are set
// afterwards, so that no character of theirs can be misread as a
// separator, and so that the driver's errors cannot quote them.
func parseURL(s string) (*mysql.Config, url.Values, error) {
	u, err := url.Parse(s)
	if err != nil {
		// url.Error quotes the URL: say only what is wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if u.Opaque != "" {
		return nil, nil, fmt.Errorf("%w: want %s://user:password@host:3306/database", ErrInvalid, strings.ToLower(u.Scheme))
	}
	if u.Fragment != "" {
		return nil, nil, fmt.Errorf("%w: unexpected #fragment", ErrInvalid)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, nil, fmt.Errorf("%w: the path must be one database name, not %q", ErrInvalid, u.Path)
	}
	host := u.Host
	if host != "" && u.Port() == "" {
		host += ":3306"
	}
	dsn := "tcp(" + host + ")/" + url.PathEscape(db)
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: query: %v", ErrInvalid, err)
	}
	return cfg, q, nil
}

// Redact returns s with its password replaced by xxxxx: the user
// information of a URL, the user:password@ of a DSN. A URL that cannot be
// parsed is not shown at all.
func Redact(s string) string {
	if IsURL(s) {
		u, err := url.Parse(s)
		if err != nil {
			return "(unparseable database URL)"
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		return u.String()
	}
	// A DSN: user[:password]@net(addr)/db; the password runs from the first
	// ':' to the last '@' before the last '/'.
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		return s
	}
	at := strings.LastIndexByte(s[:slash], '@')
	if at < 0 {
		return s
	}
	colon := strings.IndexByte(s[:at], ':')
	if colon < 0 {
		return s
	}
	return s[:colon+1] + "xxxxx" + s[at:]
}

// URL returns cfg's server, user and database as a mysql:// URL with the
// given password shown (for tests and examples; the relay logs Redact's
// form). Parameters other than the ones ParseURL adds are not carried.
func URL(cfg *mysql.Config) string {
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.User != "" {
		if cfg.Passwd != "" {
			u.User = url.UserPassword(cfg.User, cfg.Passwd)
		} else {
			u.User = url.User(cfg.User)
		}
	}
	return u.String()
}
