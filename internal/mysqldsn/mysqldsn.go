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

// ErrUnsafeCharset is wrapped, with ErrInvalid, by the errors of Parse and
// ParseURL for a connection string that asks the driver to splice values
// into the SQL text (interpolateParams) under a character set other than
// utf8mb4, utf8mb3, utf8, latin1, ascii or binary: in gbk, big5, sjis,
// cp932 or gb18030 the backslash the driver puts before a quote can end
// up as the second byte of a character, and the quote then closes the
// string, so that a value (a sink's error text) could carry SQL.
var ErrUnsafeCharset = errors.New("a character set in which interpolateParams is unsafe")

// safeCharsets are the character sets in which the driver's escaping of
// spliced values holds: no character ends in a backslash's byte.
var safeCharsets = map[string]bool{"utf8mb4": true, "utf8mb3": true, "utf8": true, "latin1": true, "ascii": true, "binary": true}

// defaultCollation is the session's collation when the connection string
// names none: the driver's default.
const defaultCollation = "utf8mb4_general_ci"

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
	// The parameters follow the last '/', as the driver reads them.
	var q url.Values
	if _, params, ok := strings.Cut(s[strings.LastIndexByte(s, '/')+1:], "?"); ok {
		if q, err = url.ParseQuery(params); err != nil {
			return nil, fmt.Errorf("%w: parameters: %v", ErrInvalid, err)
		}
	}
	if err := checkCharsets(cfg, q); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseURL reads a mysql:// or mariadb:// URL for the relay: the user and
// password of its user information (percent-decoded), host and port (3306
// when none; 127.0.0.1 when no host), the database of its path (none when
// empty) and the driver's parameters of its query. The parameters the
// relay's statements rely on are added unless the query sets them:
// parseTime=true, loc=UTC, time_zone='+00:00', interpolateParams=true and
// charset=utf8mb4 (the charset of the collation= given, if any), so that
// the session's character set is the relay's whatever the server's
// default (docs/mysql.md#connection-settings). A character set in which
// interpolation is unsafe is refused (ErrUnsafeCharset).
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
	if err := checkCharsets(cfg, q); err != nil {
		return nil, err
	}
	if !has(q, "charset") {
		collation := cfg.Collation
		if collation == "" {
			collation = defaultCollation
		}
		charset, _, _ := strings.Cut(collation, "_")
		_ = cfg.Apply(mysql.Charset(charset, collation)) // sets two fields; never fails
	}
	return cfg, nil
}

// checkCharsets refuses the character sets that the parameters q name
// (charset=, collation=, character_set_client=) when cfg interpolates and
// any of them is not in safeCharsets.
func checkCharsets(cfg *mysql.Config, q url.Values) error {
	if !cfg.InterpolateParams {
		return nil
	}
	for k, values := range q {
		for _, v := range values {
			var charsets []string
			switch {
			case k == "charset":
				charsets = strings.Split(v, ",")
			case k == "collation":
				charsets = []string{v[:strings.IndexByte(v+"_", '_')]}
			case strings.Contains(strings.ToLower(k), "character_set_client"): // also @@session.character_set_client
				charsets = []string{strings.Trim(v, "'\"`")}
			}
			for _, c := range charsets {
				if !safeCharsets[strings.ToLower(strings.TrimSpace(c))] {
					return fmt.Errorf("%w: %w: %s=%s: values spliced into the SQL text (interpolateParams) are escaped safely in utf8mb4, utf8mb3, utf8, latin1, ascii and binary only; "+
						"leave charset out (the relay uses utf8mb4), name one of those, or add interpolateParams=false for server-side prepared statements",
						ErrInvalid, ErrUnsafeCharset, k, v)
				}
			}
		}
	}
	return nil
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
